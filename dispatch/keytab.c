/*
 * The per-batch key table and the matrices built from it. The whole
 * dispatch step must fit in a millisecond at k = 1024 (26,624 key
 * occurrences), so every key of the batch is hashed once, every unique
 * key's state is looked up once per worker, every unique key's n charges
 * are computed once, and the per-sample sums only add small vectors.
 */
#include "keytab_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int esd_keytab_create(struct esd_keytab **out)
{
	if (!out)
		return -EINVAL;
	struct esd_keytab *kt = calloc(1, sizeof(*kt));
	if (!kt)
		return -ENOMEM;
	*out = kt;
	return 0;
}

void esd_keytab_free(struct esd_keytab *kt)
{
	if (!kt)
		return;
	free(kt->ukeys);
	free(kt->st);
	free(kt->occ);
	free(kt->hash);
	free(kt->vec);
	free(kt->chtab);
	free(kt->need);
	free(kt->sorted);
	free(kt->tmp);
	free(kt->rep);
	free(kt->tcls);
	free(kt->clsT);
	free(kt);
}

int esd_keytab_set_row_bytes(struct esd_keytab *kt, const uint32_t *bytes, uint32_t ntables,
			     uint32_t full)
{
	if (!kt || (ntables && (!bytes || !full)))
		return -EINVAL;
	uint8_t *cls = ntables ? malloc(ntables) : NULL;
	if (ntables && !cls)
		return -ENOMEM;
	uint64_t num[ESD_ROW_CLASSES] = {full};
	uint32_t ncls = 1;
	for (uint32_t t = 0; t < ntables; t++) {
		uint32_t c = 0;
		while (c < ncls && num[c] != bytes[t])
			c++;
		if (!bytes[t] || bytes[t] > full || (c == ncls && ncls == ESD_ROW_CLASSES)) {
			free(cls);
			return -EINVAL;
		}
		if (c == ncls)
			num[ncls++] = bytes[t];
		cls[t] = (uint8_t)c;
	}
	free(kt->tcls);
	kt->tcls = cls;
	kt->ntcls = ntables;
	kt->ncls = ncls;
	memcpy(kt->cls_num, num, sizeof(num));
	kt->cls_den = full;
	kt->clsT_n = 0;
	return 0;
}

const int64_t *esd_keytab_class_T(struct esd_keytab *kt, const int64_t *T)
{
	const uint32_t n = kt->n, nc = kt->ncls ? kt->ncls : 1;
	if (kt->clsT && kt->clsT_n == n && !memcmp(kt->clsT_of, T, n * sizeof(int64_t)))
		return kt->clsT;
	if (!kt->clsT && !(kt->clsT = malloc(ESD_ROW_CLASSES * ESD_MAX_WORKERS * sizeof(int64_t))))
		return NULL;
	for (uint32_t c = 0; c < nc; c++)
		for (uint32_t j = 0; j < n; j++) {
			/* class 0 is T itself: no rounding where nothing changes */
			const unsigned __int128 x = (unsigned __int128)(uint64_t)T[j] *
						    (c ? kt->cls_num[c] : 1);
			const uint64_t d = c ? kt->cls_den : 1;
			kt->clsT[c * n + j] = (int64_t)((x + d - 1) / d);
		}
	memcpy(kt->clsT_of, T, n * sizeof(int64_t));
	kt->clsT_n = n;
	return kt->clsT;
}

/* Charges with per-table row sizes: each key's lanes from its class's
 * costs. */
static int charges_classes(struct esd_keytab *kt, const int64_t *T, int64_t *vec)
{
	const int64_t *Tc = esd_keytab_class_T(kt, T);
	if (!Tc)
		return -ENOMEM;
	const uint32_t n = kt->n;
	for (uint32_t u = 0; u < kt->count; u++) {
		const struct esd_keystate *s = &kt->st[u];
		const int64_t *Tu = Tc + (size_t)esd_keytab_key_cls(kt, kt->ukeys[u]) * n;
		int64_t *v = vec + (size_t)u * n;
		const int64_t td = s->dirty != ESD_NO_WORKER ? Tu[s->dirty] : 0;
		for (uint32_t j = 0; j < n; j++)
			v[j] = ((s->latest >> j) & 1 ? 0 : Tu[j]) + (j == s->dirty ? 0 : td);
	}
	return 0;
}

int esd_keytab_grow_keys(struct esd_keytab *kt, size_t want)
{
	if (kt->cap_u >= want && kt->ukeys)
		return 0;
	size_t nc = kt->cap_u ? kt->cap_u : 1024;
	while (nc < want)
		nc *= 2;
	void *a;
#define RE(field, per)                                                                             \
	do {                                                                                       \
		if (!(a = realloc(kt->field, nc * (per))))                                         \
			return -ENOMEM;                                                            \
		kt->field = a;                                                                     \
	} while (0)
	RE(ukeys, sizeof(esd_key_t));
	RE(st, sizeof(struct esd_keystate));
	RE(need, sizeof(uint64_t));
	RE(sorted, sizeof(uint32_t));
	RE(tmp, sizeof(uint32_t));
	RE(vec, ESD_MAX_WORKERS * sizeof(int64_t));
#undef RE
	kt->cap_u = nc;
	return 0;
}

/* Hash tables up to this many entries (128 KiB) take the straight path. */
#define KT_STRAIGHT_ENTRIES (1u << 15)

/* One attempt at the build, over a table of 2^bits entries. */
struct kt_pass {
	uint32_t *hash; /* uid + 1, 0 = empty */
	uint32_t *occ;
	esd_key_t *ukeys;
	const esd_key_t *keys;
	uint32_t nocc, bits, mask, limit;
	uint32_t count;
	uint64_t key_or, key_and;
};

/* The long way for one occurrence: probe from entry h on. Its key's
 * number, or UINT32_MAX when the table is full (nothing added). */
static inline __attribute__((always_inline)) uint32_t probe_insert(uint32_t *hash, esd_key_t *ukeys,
                                                                   uint32_t mask, uint32_t limit,
                                                                   uint32_t h, esd_key_t key,
                                                                   uint32_t *count)
{
	for (;; h = (h + 1) & mask) {
		const uint32_t e = hash[h];
		if (!e) {
			if (*count == limit)
				return UINT32_MAX;
			ukeys[*count] = key;
			hash[h] = ++*count;
			return *count - 1;
		}
		if (ukeys[e - 1] == key)
			return e - 1;
	}
}

/* Occurrences [p, nocc) one by one. Returns 0, or 1 when the table is
 * full (the caller regrows it and starts over).
 * Nearly every occurrence finds its home entry empty (a new key) or
 * holding its key. While the table is small enough to stay in L2 (new
 * keys are then frequent too in a Criteo-shaped batch), both take one
 * straight path with no
 * branch on which (a branch a predictor misses for every new key): the
 * entry, the key's slot in ukeys and its number are written either way
 * and the count keeps what is new. A larger table's lines come from
 * further out and new keys are rarer; there the branchy probe wins, as its
 * shorter iterations keep more of those misses in flight (which wins at
 * which k: bench/results/dispatch.md). */
static int build_scalar(struct kt_pass *ps, uint32_t p)
{
	uint32_t *hash = ps->hash, *occ = ps->occ;
	esd_key_t *ukeys = ps->ukeys;
	const esd_key_t *keys = ps->keys;
	const uint32_t mask = ps->mask, limit = ps->limit, bits = ps->bits, nocc = ps->nocc;
	uint64_t key_or = ps->key_or, key_and = ps->key_and;
	uint32_t count = ps->count;
	int full = 0;
	const int straight = mask < KT_STRAIGHT_ENTRIES;
	for (; p < nocc; p++) {
		const esd_key_t key = keys[p];
		/* the OR and AND of the occurrences are those of the keys */
		key_or |= key;
		key_and &= key;
		uint32_t h = key_hash(key, bits), e;
		if (straight) {
			e = hash[h];
			const uint32_t isnew = e == 0, old = isnew - 1; /* all ones if not new */
			const uint32_t at = (e - 1) & old;              /* 0 when new: any entry */
			uint32_t home = isnew | (ukeys[at] == key);
			__asm__("" : "+r"(home)); /* one test, not a branch per operand */
			if (__builtin_expect(home, 1)) {
				const uint32_t u = (count & ~old) | (at & old);
				ukeys[count] = key;
				hash[h] = u + 1;
				occ[p] = u;
				count += isnew;
				if (__builtin_expect(count > limit, 0)) {
					full = 1;
					break;
				}
				continue;
			}
			h = (h + 1) & mask; /* a collision: probe on */
		}
		const uint32_t u = probe_insert(hash, ukeys, mask, limit, h, key, &count);
		if (u == UINT32_MAX) {
			full = 1;
			break;
		}
		occ[p] = u;
	}
	ps->key_or = key_or;
	ps->key_and = key_and;
	ps->count = count;
	return full;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_BUILD_V8 1

/* The CPU's AVX-512 has what build_v8 uses (asked once). */
static bool have_build_v8(void)
{
	static int has = -1;
	int v = __atomic_load_n(&has, __ATOMIC_RELAXED);
	if (v < 0) {
		v = esd_have_avx512() && __builtin_cpu_supports("avx512dq") &&
		    __builtin_cpu_supports("avx512vl");
		__atomic_store_n(&has, v, __ATOMIC_RELAXED);
	}
	return v;
}
/* The build eight occurrences at a time: their eight home entries and the
 * keys those name gathered at once. Lanes whose home holds their key take
 * its number; lanes whose home is empty are new keys, numbered in lane
 * order (first seen, as build_scalar numbers them) and inserted by one
 * scatter. Only a group with a lane whose home holds another key, or with
 * two new lanes on one home entry (the same key twice, or two keys that
 * share a home), takes the probe's long way for its lanes that are not
 * found, in lane order: rare in a Criteo-shaped batch. ukeys needs room
 * for 8 entries past the count (a compress writes 8).
 * Long: the vector loop (hash, gather, compare, scatter eight occurrences
 * at a time) keeps its lanes' state in registers across the loop. */
__attribute__((target("avx512f,avx512dq,avx512vl,popcnt"))) static int build_v8(struct kt_pass *ps)
{
	uint32_t *hash = ps->hash, *occ = ps->occ;
	esd_key_t *ukeys = ps->ukeys;
	const esd_key_t *keys = ps->keys;
	const uint32_t nocc = ps->nocc, limit = ps->limit;
	uint32_t count = ps->count;
	const __m256i mul = _mm256_set1_epi64x((long long)UINT64_C(0x9E3779B97F4A7C15));
	const __m128i shift = _mm_cvtsi32_si128((int)(64 - ps->bits));
	const __m256i one = _mm256_set1_epi32(1);
	const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	const __m256i minus1 = _mm256_set1_epi32(-1);
	const __m256i rot1 = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
	const __m256i rot2 = _mm256_setr_epi32(2, 3, 4, 5, 6, 7, 0, 1);
	const __m256i rot3 = _mm256_setr_epi32(3, 4, 5, 6, 7, 0, 1, 2);
	const __m256i rot4 = _mm256_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3);
	__m512i vor = _mm512_setzero_si512(), vand = _mm512_set1_epi64(-1);
	uint32_t p = 0;
	for (; p + 8 <= nocc; p += 8) {
		const __m512i k = _mm512_loadu_si512(keys + p);
		vor = _mm512_or_si512(vor, k);
		vand = _mm512_and_si512(vand, k);
		/* the hash's multiply in two 4-lane halves: a 512-bit one
		 * lowers the core's clock for a while, and the whole step
		 * was slower in its other phases: bench/results/dispatch.md */
		const __m256i k0 = _mm512_castsi512_si256(k), k1 = _mm512_extracti64x4_epi64(k, 1);
		const __m256i h = _mm256_setr_m128i(
		    _mm256_cvtepi64_epi32(_mm256_srl_epi64(_mm256_mullo_epi64(k0, mul), shift)),
		    _mm256_cvtepi64_epi32(_mm256_srl_epi64(_mm256_mullo_epi64(k1, mul), shift)));
		const __m256i e = _mm256_i32gather_epi32((const int *)hash, h, 4);
		const __mmask8 used = _mm256_test_epi32_mask(e, e);
		const __m256i at = _mm256_sub_epi32(e, one);
		const __m512i uk = _mm512_mask_i32gather_epi64(_mm512_setzero_si512(), used, at,
		                                               (const long long *)ukeys, 8);
		const __mmask8 found = _mm512_mask_cmpeq_epi64_mask(used, uk, k);
		_mm256_mask_storeu_epi32(occ + p, found, at);
		const __mmask8 isnew = (__mmask8)~used;
		/* two new lanes on one home entry: every pair of lanes is some
		 * rotation by 1 to 4 apart (the lanes not new get homes no lane
		 * has, -1 - lane; cheaper than a conflict instruction here) */
		const __m256i hn =
		    _mm256_mask_blend_epi32(isnew, _mm256_sub_epi32(minus1, iota), h);
		const __mmask8 clash =
		    _mm256_cmpeq_epi32_mask(hn, _mm256_permutexvar_epi32(rot1, hn)) |
		    _mm256_cmpeq_epi32_mask(hn, _mm256_permutexvar_epi32(rot2, hn)) |
		    _mm256_cmpeq_epi32_mask(hn, _mm256_permutexvar_epi32(rot3, hn)) |
		    _mm256_cmpeq_epi32_mask(hn, _mm256_permutexvar_epi32(rot4, hn));
		if (__builtin_expect((__mmask8)(found | isnew) == 0xff && !clash, 1)) {
			const uint32_t nnew = (uint32_t)__builtin_popcount(isnew);
			if (__builtin_expect(count + nnew > limit, 0)) {
				ps->count = count;
				return 1;
			}
			const __m256i u = _mm256_add_epi32(_mm256_set1_epi32((int)count),
			                                   _mm256_maskz_expand_epi32(isnew, iota));
			_mm512_storeu_si512(ukeys + count, _mm512_maskz_compress_epi64(isnew, k));
			_mm256_mask_i32scatter_epi32((int *)hash, isnew, h,
			                             _mm256_add_epi32(u, one), 4);
			_mm256_mask_storeu_epi32(occ + p, isnew, u);
			count += nnew;
			continue;
		}
		/* the rest of the group the long way, in lane order (the OR and
		 * AND already have its keys) */
		for (uint32_t rest = (uint8_t)~found; rest; rest &= rest - 1) {
			const uint32_t q = p + (uint32_t)__builtin_ctz(rest);
			const uint32_t u =
			    probe_insert(hash, ukeys, ps->mask, limit, key_hash(keys[q], ps->bits),
			                 keys[q], &count);
			if (u == UINT32_MAX) {
				ps->count = count;
				return 1;
			}
			occ[q] = u;
		}
	}
	uint64_t o[8], a[8];
	_mm512_storeu_si512(o, vor);
	_mm512_storeu_si512(a, vand);
	for (int l = 0; l < 8; l++) {
		ps->key_or |= o[l];
		ps->key_and &= a[l];
	}
	ps->count = count;
	return build_scalar(ps, p);
}
#endif

int esd_keytab_build(struct esd_keytab *kt, const struct esd_batch *b, uint32_t n)
{
	if (!kt || !b || (b->k && (!b->off || !b->keys)) || n == 0 || n > ESD_MAX_WORKERS)
		return -EINVAL;
	if (b->k && b->off[0] != 0)
		return -EINVAL;
	for (uint32_t i = 0; i < b->k; i++)
		if (b->off[i + 1] < b->off[i])
			return -EINVAL;
	const uint32_t nocc = b->k ? b->off[b->k] : 0;
	if (nocc > (1u << 31))
		return -EINVAL;
	/* table sized from the last batch's unique count (batches of one job
	 * look alike), at most 2 x occurrences; rebuilt larger if it fills */
	uint32_t bits = 10;
	while (((uint64_t)1 << bits) < 4 * (uint64_t)kt->count_hint &&
	       ((uint64_t)1 << bits) < 2 * (uint64_t)nocc)
		bits++;
	if (esd_grow((void **)&kt->occ, &kt->cap_occ, nocc, sizeof(uint32_t)))
		return -ENOMEM;
	/* unique keys <= nocc: size the per-key arrays for the worst case,
	 * and 8 more (build_v8 writes 8 keys at a time) */
	if (esd_keytab_grow_keys(kt, (size_t)nocc + 8))
		return -ENOMEM;
	struct kt_pass ps;
	for (;; bits++) {
		const size_t hsize = (size_t)1 << bits;
		if (esd_grow((void **)&kt->hash, &kt->cap_hash, hsize, sizeof(uint32_t)))
			return -ENOMEM;
		/* an empty table: 4 bytes per entry, a few per unique key,
		 * cleared at memory speed */
		memset(kt->hash, 0, hsize * sizeof(uint32_t));
		ps = (struct kt_pass){.hash = kt->hash,
		                      .occ = kt->occ,
		                      .ukeys = kt->ukeys,
		                      .keys = b->keys,
		                      .nocc = nocc,
		                      .bits = bits,
		                      .mask = (uint32_t)hsize - 1,
		                      .limit = (uint32_t)(hsize / 2),
		                      .key_and = ~UINT64_C(0)};
		int full;
#ifdef HAVE_BUILD_V8
		/* the vector build where the straight path would run (a table
		 * that stays in L2); larger tables keep the branchy probe */
		if (hsize <= KT_STRAIGHT_ENTRIES && have_build_v8())
			full = build_v8(&ps);
		else
#endif
			full = build_scalar(&ps, 0);
		if (!full)
			break;
	}
	const uint32_t count = ps.count;
	kt->key_or = ps.key_or;
	kt->key_and = ps.key_and;
	kt->count_hint = count;
	kt->hbits = bits;
	kt->n = n;
	kt->k = b->k;
	kt->nocc = nocc;
	kt->count = count;
	kt->sorted_ok = 0;
	kt->nrep = 0;
	kt->need_ready = 0;
	kt->gen++;
	struct esd_keystate *st = kt->st;
	for (uint32_t u = 0; u < count; u++)
		st[u] = (struct esd_keystate){0, 0, ESD_NO_WORKER, {0}};
	return 0;
}

uint32_t esd_keytab_count(const struct esd_keytab *kt)
{
	return kt ? kt->count : 0;
}

uint32_t esd_keytab_workers(const struct esd_keytab *kt)
{
	return kt ? kt->n : 0;
}

const esd_key_t *esd_keytab_keys(const struct esd_keytab *kt)
{
	return kt ? kt->ukeys : NULL;
}

const uint32_t *esd_keytab_occ(const struct esd_keytab *kt)
{
	return kt ? kt->occ : NULL;
}

struct esd_keystate *esd_keytab_states(struct esd_keytab *kt)
{
	return kt ? kt->st : NULL;
}

int64_t esd_keytab_find(const struct esd_keytab *kt, esd_key_t key)
{
	if (!kt || !kt->count)
		return -1;
	const uint32_t mask = (1u << kt->hbits) - 1;
	for (uint32_t h = key_hash(key, kt->hbits);; h = (h + 1) & mask) {
		uint32_t e = kt->hash[h];
		if (!e)
			return -1;
		if (kt->ukeys[e - 1] == key)
			return e - 1;
	}
}

int esd_keytab_set(struct esd_keytab *kt, uint32_t u, uint32_t j, enum esd_row_state st)
{
	if (!kt || u >= kt->count || j >= kt->n)
		return -EINVAL;
	struct esd_keystate *s = &kt->st[u];
	const uint64_t bit = UINT64_C(1) << j;
	switch (st) {
	case ESD_ROW_ABSENT:
	case ESD_ROW_OUTDATED:
	case ESD_ROW_CLEAN:
		if (st == ESD_ROW_CLEAN && s->dirty != ESD_NO_WORKER && s->dirty != j)
			return -EINVAL;
		if (s->dirty == j)
			s->dirty = ESD_NO_WORKER;
		if (st == ESD_ROW_CLEAN)
			s->latest |= bit;
		else
			s->latest &= ~bit;
		if (st == ESD_ROW_ABSENT)
			s->cached &= ~bit;
		else
			s->cached |= bit;
		return 0;
	case ESD_ROW_DIRTY:
		if ((s->dirty != ESD_NO_WORKER && s->dirty != j) || (s->latest & ~bit))
			return -EINVAL;
		s->dirty = (uint8_t)j;
		s->latest |= bit;
		s->cached |= bit;
		return 0;
	}
	return -EINVAL;
}

/* vec[u * n + j] = unique key u's Alg. 1 charge on worker j: T_j unless
 * j holds it latest, plus T of its DIRTY holder unless that is j. For
 * n <= 8 a key's row is copied from a table indexed by its latest mask
 * (2^n rows, built per call) instead of computed lane by lane. */
/* The charges of a key on every worker by its latest mask m: T_j where
 * bit j of m is clear (row m is row m without its lowest bit, that lane
 * zeroed). Built when n or T changes, else kept. */
static const int64_t *charge_table(struct esd_keytab *kt, const int64_t *T)
{
	const uint32_t n = kt->n, rows = 1u << n;
	if (kt->chtab && kt->chn == n && !memcmp(kt->chT, T, n * sizeof(int64_t)))
		return kt->chtab;
	if (!kt->chtab && !(kt->chtab = malloc(256 * 8 * sizeof(int64_t))))
		return NULL;
	int64_t *tab = kt->chtab;
	for (uint32_t j = 0; j < n; j++)
		tab[j] = T[j];
	for (uint32_t m = 1; m < rows; m++) {
		const int64_t *from = tab + (m & (m - 1)) * n;
		for (uint32_t j = 0; j < n; j++)
			tab[m * n + j] = from[j];
		tab[m * n + (uint32_t)__builtin_ctz(m)] = 0;
	}
	memcpy(kt->chT, T, n * sizeof(int64_t));
	kt->chn = n;
	return tab;
}

/* charges8: all lanes but lane j, for j = 0..7 (and 8: no holder, no
 * lane) */
static const int64_t lanes_but[9][8] = {
    {0, -1, -1, -1, -1, -1, -1, -1}, {-1, 0, -1, -1, -1, -1, -1, -1},
    {-1, -1, 0, -1, -1, -1, -1, -1}, {-1, -1, -1, 0, -1, -1, -1, -1},
    {-1, -1, -1, -1, 0, -1, -1, -1}, {-1, -1, -1, -1, -1, 0, -1, -1},
    {-1, -1, -1, -1, -1, -1, 0, -1}, {-1, -1, -1, -1, -1, -1, -1, 0},
    {0, 0, 0, 0, 0, 0, 0, 0}};

/* n = 8: a key's row of the table, plus the DIRTY holder's T on every
 * other lane (t9: T and a 0 for "no holder", so no branch on the data),
 * as two 4-lane vectors (AVX2 where the CPU has it). */
__attribute__((target_clones("avx2", "default"))) static void
charges8_v4(const struct esd_keystate *st, uint32_t cnt, const int64_t *tab, const int64_t *t9,
            int64_t *vec)
{
	typedef int64_t v4 __attribute__((vector_size(32)));
	for (uint32_t u = 0; u < cnt; u++) {
		const struct esd_keystate *s = &st[u];
		const int64_t *r = tab + (s->latest & 255) * 8;
		const uint32_t h = s->dirty < 8 ? s->dirty : 8;
		const int64_t td = t9[h];
		const v4 d = {td, td, td, td};
		v4 x0, x1, m0, m1;
		memcpy(&x0, r, 32);
		memcpy(&x1, r + 4, 32);
		memcpy(&m0, lanes_but[h], 32);
		memcpy(&m1, lanes_but[h] + 4, 32);
		x0 += d & m0;
		x1 += d & m1;
		memcpy(vec + (size_t)u * 8, &x0, 32);
		memcpy(vec + (size_t)u * 8 + 4, &x1, 32);
	}
}

/* The same as one 8-lane vector, for CPUs with AVX-512 (compiled for
 * AVX2 or SSE2 an 8-lane vector goes through memory: slower than two
 * 4-lane ones, hence two functions rather than one with target_clones). */
__attribute__((target("avx512f"))) static void charges8_v8(const struct esd_keystate *st,
                                                           uint32_t cnt, const int64_t *tab,
                                                           const int64_t *t9, int64_t *vec)
{
	typedef int64_t v8 __attribute__((vector_size(64)));
	for (uint32_t u = 0; u < cnt; u++) {
		const struct esd_keystate *s = &st[u];
		const uint32_t h = s->dirty < 8 ? s->dirty : 8;
		const int64_t td = t9[h];
		const v8 d = {td, td, td, td, td, td, td, td};
		v8 x, m;
		memcpy(&x, tab + (s->latest & 255) * 8, 64);
		memcpy(&m, lanes_but[h], 64);
		x += d & m;
		memcpy(vec + (size_t)u * 8, &x, 64);
	}
}

bool esd_have_avx512(void)
{
	static int has = -1; /* any thread may ask first: they all find the same */
	int v = __atomic_load_n(&has, __ATOMIC_RELAXED);
	if (v < 0) {
		v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("popcnt") &&
		    !getenv("ESD_NO_AVX512");
		__atomic_store_n(&has, v, __ATOMIC_RELAXED);
	}
	return v;
}

static void charges8(const struct esd_keystate *st, uint32_t cnt, const int64_t *tab,
                     const int64_t *T, int64_t *vec)
{
	int64_t t9[9];
	memcpy(t9, T, 8 * sizeof(int64_t));
	t9[8] = 0;
	if (esd_have_avx512())
		charges8_v8(st, cnt, tab, t9, vec);
	else
		charges8_v4(st, cnt, tab, t9, vec);
}

int esd_keytab_charges(struct esd_keytab *kt, const int64_t *T, int64_t *vec)
{
	const uint32_t n = kt->n, cnt = kt->count;
	if (kt->ncls > 1)
		return charges_classes(kt, T, vec);
	if (n > 8) {
		for (uint32_t u = 0; u < cnt; u++) {
			const struct esd_keystate *s = &kt->st[u];
			int64_t *v = vec + (size_t)u * n;
			const int64_t td = s->dirty != ESD_NO_WORKER ? T[s->dirty] : 0;
			for (uint32_t j = 0; j < n; j++)
				v[j] = ((s->latest >> j) & 1 ? 0 : T[j]) + (j == s->dirty ? 0 : td);
		}
		return 0;
	}
	const int64_t *tab = charge_table(kt, T);
	if (!tab)
		return -ENOMEM;
	if (n == 8) {
		charges8(kt->st, cnt, tab, T, vec);
		return 0;
	}
	const uint32_t rows = 1u << n;
	for (uint32_t u = 0; u < cnt; u++) {
		const struct esd_keystate *s = &kt->st[u];
		const int64_t *r = tab + (s->latest & (rows - 1)) * n;
		int64_t *v = vec + (size_t)u * n;
		const int64_t td = s->dirty != ESD_NO_WORKER ? T[s->dirty] : 0;
		for (uint32_t j = 0; j < n; j++)
			v[j] = r[j] + td;
		if (s->dirty != ESD_NO_WORKER)
			v[s->dirty] -= td;
	}
	return 0;
}

/* n = 8 (the paper's 8 workers), AVX2 where the CPU has it: two 4-lane
 * adds per key occurrence (GNU vector extension; the compiler makes an
 * SSE2 and an AVX2 body and the loader picks one). */
__attribute__((target_clones("avx2", "default"))) static void
costmat_sum8_v4(const struct esd_batch *b, const uint32_t *occ, const int64_t *vec, int64_t *cost)
{
	typedef int64_t v4 __attribute__((vector_size(32)));
	for (uint32_t i = 0; i < b->k; i++) {
		v4 a0 = {0, 0, 0, 0}, a1 = {0, 0, 0, 0};
		for (uint32_t p = b->off[i]; p < b->off[i + 1]; p++) {
			const int64_t *v = vec + (size_t)occ[p] * 8;
			v4 x0, x1;
			memcpy(&x0, v, 32);
			memcpy(&x1, v + 4, 32);
			a0 += x0;
			a1 += x1;
		}
		int64_t *row = cost + (size_t)i * 8;
		memcpy(row, &a0, 32);
		memcpy(row + 4, &a1, 32);
	}
}

/* The same with one 8-lane add per occurrence, for CPUs with AVX-512. */
__attribute__((target("avx512f"))) static void
costmat_sum8_v8(const struct esd_batch *b, const uint32_t *occ, const int64_t *vec, int64_t *cost)
{
	typedef int64_t v8 __attribute__((vector_size(64)));
	for (uint32_t i = 0; i < b->k; i++) {
		v8 a = {0, 0, 0, 0, 0, 0, 0, 0};
		for (uint32_t p = b->off[i]; p < b->off[i + 1]; p++) {
			v8 x;
			memcpy(&x, vec + (size_t)occ[p] * 8, 64);
			a += x;
		}
		memcpy(cost + (size_t)i * 8, &a, 64);
	}
}

static void costmat_sum8(const struct esd_batch *b, const uint32_t *occ, const int64_t *vec,
                         int64_t *cost)
{
	if (esd_have_avx512())
		costmat_sum8_v8(b, occ, vec, cost);
	else
		costmat_sum8_v4(b, occ, vec, cost);
}

void esd_costmat_sum(const struct esd_batch *b, const uint32_t *occ, const int64_t *vec, uint32_t n,
                     int64_t *cost)
{
	if (n == 8) {
		costmat_sum8(b, occ, vec, cost);
		return;
	}
	for (uint32_t i = 0; i < b->k; i++) {
		int64_t *row = cost + (size_t)i * n;
		memset(row, 0, n * sizeof(int64_t));
		for (uint32_t p = b->off[i]; p < b->off[i + 1]; p++) {
			const int64_t *v = vec + (size_t)occ[p] * n;
			for (uint32_t j = 0; j < n; j++)
				row[j] += v[j];
		}
	}
}

int esd_costmat_check(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                      const int64_t *cost, int64_t scale)
{
	if (!kt || !b || !T || !cost || b->k != kt->k || (b->k && b->off[b->k] != kt->nocc))
		return -EINVAL;
	int64_t tmax = 0;
	for (uint32_t j = 0; j < kt->n; j++) {
		if (T[j] < 0 || T[j] > ESD_COST_MAX)
			return -EINVAL;
		if (T[j] > tmax)
			tmax = T[j];
	}
	uint32_t maxlen = 0;
	for (uint32_t i = 0; i < b->k; i++)
		if (b->off[i + 1] - b->off[i] > maxlen)
			maxlen = b->off[i + 1] - b->off[i];
	if (tmax && (int64_t)maxlen > ESD_COST_MAX / (2 * tmax * scale))
		return -EOVERFLOW;
	return 0;
}

int esd_costmat_build(const struct esd_keytab *kt, const struct esd_batch *b, const int64_t *T,
                      int64_t *cost)
{
	int rc = esd_costmat_check(kt, b, T, cost, 1);
	if (rc)
		return rc;
	const uint32_t n = kt->n;

	int64_t *vec = kt->vec;
	/* the key table's charge table is scratch */
	if ((rc = esd_keytab_charges((struct esd_keytab *)kt, T, vec)))
		return rc;
	esd_costmat_sum(b, kt->occ, vec, n, cost);
	return 0;
}

int esd_scoremat_build(const struct esd_keytab *kt, const struct esd_batch *b,
                       const uint64_t *tables, int32_t *score)
{
	if (!kt || !b || !score || b->k != kt->k || (b->k && b->off[b->k] != kt->nocc))
		return -EINVAL;
	const uint32_t n = kt->n;
	/* per unique key: the workers it counts for (0 when its table is off) */
	uint64_t *m = (uint64_t *)kt->vec;
	for (uint32_t u = 0; u < kt->count; u++) {
		uint32_t t = esd_key_table(kt->ukeys[u]);
		int on = !tables || ((tables[t / 64] >> (t % 64)) & 1);
		m[u] = on ? kt->st[u].latest : 0;
	}
	for (uint32_t i = 0; i < b->k; i++) {
		int32_t *row = score + (size_t)i * n;
		memset(row, 0, n * sizeof(int32_t));
		for (uint32_t p = b->off[i]; p < b->off[i + 1]; p++)
			for (uint64_t x = m[kt->occ[p]]; x; x &= x - 1)
				row[__builtin_ctzll(x)]++;
	}
	return 0;
}

/* Keys whose varying bits fit in 32 bits once the constant ones between
 * the id and the table are dropped (a batch's keys, in practice): sort
 * (compact key << 32 | uid) words, all digit counts from one pass, so the
 * scatter passes move one word each without going back to the keys.
 * Returns 0, or -1 when the keys do not compact. */
static int sort_compact(struct esd_keytab *kt, uint64_t varying)
{
	const uint32_t cnt = kt->count;
	const uint64_t lo = varying & ESD_KEY_ID_MASK, hi = varying >> ESD_KEY_ID_BITS;
	const uint32_t lo_bits = lo ? 64u - (uint32_t)__builtin_clzll(lo) : 0;
	const uint32_t hi_shift = hi ? (uint32_t)__builtin_ctzll(hi) : 0;
	const uint32_t hi_bits = hi ? 64u - (uint32_t)__builtin_clzll(hi) - hi_shift : 0;
	const uint32_t bits = lo_bits + hi_bits;
	if (bits > 32 || cnt > (UINT32_C(1) << 31))
		return -1;
	const uint64_t lo_mask = (UINT64_C(1) << lo_bits) - 1;
	const uint64_t hi_mask = (UINT64_C(1) << hi_bits) - 1;
	const uint32_t passes = bits ? (bits + 10) / 11 : 0;
	const uint32_t width = passes ? (bits + passes - 1) / passes : 0;
	const uint32_t dmask = (1u << width) - 1;
	/* the words live in vec (count x ESD_MAX_WORKERS int64: room for two
	 * arrays of count words) */
	uint64_t *src = (uint64_t *)kt->vec, *dst = src + cnt;
	_Static_assert(ESD_MAX_WORKERS >= 2, "two word arrays in vec");
	const uint32_t nb = dmask + 1; /* buckets per digit, <= 2048 */
	uint32_t cc[3 * 2048], *c[3] = {cc, cc + nb, cc + 2 * nb};
	memset(cc, 0, 3 * nb * sizeof(uint32_t));
	for (uint32_t u = 0; u < cnt; u++) {
		const uint64_t key = kt->ukeys[u];
		const uint64_t ck =
		    (((key >> ESD_KEY_ID_BITS >> hi_shift) & hi_mask) << lo_bits) | (key & lo_mask);
		src[u] = ck << 32 | u;
		/* passes <= 3: unused rows count into c[passes..2] harmlessly */
		c[0][ck & dmask]++;
		c[1][(ck >> width) & dmask]++;
		c[2][(ck >> (2 * width)) & dmask]++;
	}
	for (uint32_t d = 0; d < passes; d++) {
		uint32_t sum = 0;
		for (uint32_t x = 0; x <= dmask; x++) {
			const uint32_t y = c[d][x];
			c[d][x] = sum;
			sum += y;
		}
		const uint32_t shift = 32 + d * width;
		uint32_t *cd = c[d];
		if (d + 1 == passes) {
			/* the last pass scatters the key numbers alone */
			uint32_t *out = kt->sorted;
			for (uint32_t q = 0; q < cnt; q++) {
				const uint64_t w = src[q];
				out[cd[(w >> shift) & dmask]++] = (uint32_t)w;
			}
			return 0;
		}
		for (uint32_t q = 0; q < cnt; q++) {
			const uint64_t w = src[q];
			dst[cd[(w >> shift) & dmask]++] = w;
		}
		uint64_t *t = src;
		src = dst;
		dst = t;
	}
	for (uint32_t q = 0; q < cnt; q++) /* no pass: all keys alike */
		kt->sorted[q] = (uint32_t)src[q];
	return 0;
}

int esd_keytab_sort(struct esd_keytab *kt)
{
	if (kt->sorted_ok)
		return 0;
	const uint32_t cnt = kt->count;
	const uint64_t varying = cnt ? kt->key_or ^ kt->key_and : 0;
	if (!sort_compact(kt, varying)) {
		kt->sorted_ok = 1;
		return 0;
	}
	uint32_t *src = kt->sorted, *dst = kt->tmp;
	for (uint32_t u = 0; u < cnt; u++)
		src[u] = u;
	for (int shift = 0; shift < 64; shift += 11) {
		if (!((varying >> shift) & 2047))
			continue; /* every key has the same digit here */
		uint32_t c[2048] = {0};
		for (uint32_t q = 0; q < cnt; q++)
			c[(kt->ukeys[src[q]] >> shift) & 2047]++;
		uint32_t s = 0;
		for (int d = 0; d < 2048; d++) {
			uint32_t x = c[d];
			c[d] = s;
			s += x;
		}
		for (uint32_t q = 0; q < cnt; q++)
			dst[c[(kt->ukeys[src[q]] >> shift) & 2047]++] = src[q];
		uint32_t *t = src;
		src = dst;
		dst = t;
	}
	kt->sorted = src;
	kt->tmp = dst;
	kt->sorted_ok = 1;
	return 0;
}

/* Replicated rows: every worker needs them, whatever the assignment. */
static void need_replicated(struct esd_keytab *kt)
{
	const uint64_t all = kt->n == 64 ? ~UINT64_C(0) : (UINT64_C(1) << kt->n) - 1;
	for (uint32_t r = 0; r < kt->nrep; r++)
		kt->need[kt->rep[r]] = all;
}

int esd_keytab_need(struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign)
{
	if (!kt || !b || !assign || b->k != kt->k || (b->k && b->off[b->k] != kt->nocc))
		return -EINVAL;
	if (kt->need_ready) {
		kt->need_ready = 0;
		return 0;
	}
	uint64_t *need = kt->need;
	const uint32_t *occ = kt->occ, *off = b->off, n = kt->n;
	memset(need, 0, (size_t)kt->count * sizeof(uint64_t));
	for (uint32_t i = 0; i < b->k; i++) {
		if (assign[i] >= n)
			return -EINVAL;
		const uint64_t bit = UINT64_C(1) << assign[i];
		for (uint32_t p = off[i]; p < off[i + 1]; p++)
			need[occ[p]] |= bit;
	}
	need_replicated(kt);
	return 0;
}

void esd_keytab_need_ready(struct esd_keytab *kt)
{
	need_replicated(kt);
	kt->need_ready = 1;
}
