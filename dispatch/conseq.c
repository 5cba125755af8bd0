/*
 * The consequence of a decision (steps 1, 3 and 6 of docs/design.md §3)
 * and Herald's communication plan (Alg. 2: per worker, the DIRTY rows
 * other workers need next iteration, which is exactly step 1). Keys are
 * walked in ascending order so every per-worker list comes out sorted, as
 * the cache snapshots want them.
 */
#include "keytab_internal.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The 8 low bits of m, one per byte (bit j to bit 8j): byte j of the
 * broadcast keeps bit j only, and adding 0x7f carries it to bit 7. */
static inline uint64_t spread8(uint64_t m)
{
	const uint64_t y =
	    ((m & 255) * UINT64_C(0x0101010101010101)) & UINT64_C(0x8040201008040201);
	return ((y + UINT64_C(0x7f7f7f7f7f7f7f7f)) >> 7) & UINT64_C(0x0101010101010101);
}

static const char *const cq_names[ESD_CQ_KINDS] = {"update_value", "miss_pull", "evict_push",
                                                   "update_grad"};

const char *esd_cq_kind_name(enum esd_cq_kind kind)
{
	return (unsigned)kind < ESD_CQ_KINDS ? cq_names[kind] : "?";
}

enum esd_xfer_kind esd_cq_xfer_kind(enum esd_cq_kind kind)
{
	switch (kind) {
	case ESD_CQ_MISS_PULL:
		return ESD_XFER_MISS_PULL;
	case ESD_CQ_EVICT_PUSH:
		return ESD_XFER_EVICT_PUSH;
	case ESD_CQ_UPDATE_VALUE:
	case ESD_CQ_UPDATE_GRAD:
		return ESD_XFER_UPDATE_PUSH;
	default:
		return ESD_XFER_OTHER;
	}
}

int esd_conseq_create(struct esd_conseq **out)
{
	if (!out)
		return -EINVAL;
	struct esd_conseq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	*out = cq;
	return 0;
}

void esd_conseq_free(struct esd_conseq *cq)
{
	if (!cq)
		return;
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		free(cq->off[q]);
		free(cq->keys[q]);
	}
	free(cq);
}

/* Size the lists for n workers and the given counts; off[kind] holds the
 * counts on entry and the starts on return (off[kind][n] = total). */
static int cq_layout(struct esd_conseq *cq, uint32_t n, uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS])
{
	if (cq->cap_n < n + 1) {
		for (int q = 0; q < ESD_CQ_KINDS; q++) {
			void *p = realloc(cq->off[q], (ESD_MAX_WORKERS + 1) * sizeof(uint32_t));
			if (!p)
				return -ENOMEM;
			cq->off[q] = p;
		}
		cq->cap_n = ESD_MAX_WORKERS + 1;
	}
	cq->n = n;
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		uint32_t s = 0;
		for (uint32_t j = 0; j < n; j++) {
			cq->off[q][j] = s;
			s += cnt[q][j];
		}
		cq->off[q][n] = s;
		if (cq->cap_keys[q] < s || !cq->keys[q]) {
			size_t nc = cq->cap_keys[q] ? cq->cap_keys[q] : 1024;
			while (nc < s)
				nc *= 2;
			void *p = realloc(cq->keys[q], nc * sizeof(esd_key_t));
			if (!p)
				return -ENOMEM;
			cq->keys[q] = p;
			cq->cap_keys[q] = nc;
		}
	}
	return 0;
}

/* Cost of worker j's transfers of kind q: its keys' class costs summed
 * (per-table row sizes), else count x T_j. */
static int64_t list_cost(const struct esd_conseq *cq, const struct esd_keytab *kt,
			 const int64_t *Tc, const int64_t *T, int q, uint32_t j)
{
	const uint32_t cnt = esd_conseq_count(cq, (enum esd_cq_kind)q, j);
	if (!Tc)
		return (int64_t)cnt * T[j];
	const esd_key_t *k = esd_conseq_keys(cq, (enum esd_cq_kind)q, j);
	int64_t c = 0;
	for (uint32_t i = 0; i < cnt; i++)
		c += Tc[(size_t)esd_keytab_key_cls(kt, k[i]) * cq->n + j];
	return c;
}

void esd_conseq_costs(struct esd_conseq *cq, const struct esd_keytab *kt, const int64_t *T)
{
	/* the key table's class costs are scratch */
	const int64_t *Tc = kt && kt->ncls > 1 && kt->n == cq->n
				    ? esd_keytab_class_T((struct esd_keytab *)kt, T)
				    : NULL;
	cq->total_cost = 0;
	memset(cq->worker_cost, 0, sizeof(cq->worker_cost));
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		cq->cost[q] = 0;
		for (uint32_t j = 0; j < cq->n; j++) {
			int64_t c = list_cost(cq, kt, Tc, T, q, j);
			cq->cost[q] += c;
			cq->worker_cost[j] += c;
		}
		cq->total_cost += cq->cost[q];
	}
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_LISTS_V8 1

/* Where lists_one_pass's lists go: per worker w, its needed keys and
 * their states from ws[w], its pulls from km[w], its gradient pushes from
 * kg[w], and the keys DIRTY on it that others need (its value pushes)
 * from kv[w]; on return the same arrays hold each list's end. */
struct lists_at {
	uint32_t ws[ESD_MAX_WORKERS], km[ESD_MAX_WORKERS], kg[ESD_MAX_WORKERS], kv[ESD_MAX_WORKERS];
};

/* lists_one_pass's loop for CPUs with AVX-512: the unique keys gathered
 * once in ascending order (key, need, latest, holder), then a pass per
 * worker that compresses eight keys at a time into each of its lists, so
 * nothing branches on the data. A list is written eight entries at a time
 * and may be written up to seven entries past its end: each list has that
 * slack before whatever follows it that is written earlier (the caller
 * lays the lists out so), and a worker's pass writes its own lists only,
 * after the previous worker's. g is scratch for 4 x the count rounded up
 * to 8 words. */
__attribute__((target("avx512f,popcnt"))) static void
lists_v8(const struct esd_keytab *kt, int full, uint64_t *g, esd_key_t *wk, uint8_t *ws,
         esd_key_t *km, esd_key_t *kg, esd_key_t *kv, struct lists_at *at)
{
	const uint32_t n = kt->n, count = kt->count, c8 = (count + 7) & ~7u;
	uint64_t *K = g, *N = g + c8, *L = g + 2 * c8, *D = g + 3 * c8;
	const long long *ukeys = (const long long *)kt->ukeys, *need = (const long long *)kt->need;
	/* latest and dirty of key u are words 3u and 3u + 2 of the states */
	_Static_assert(sizeof(struct esd_keystate) == 24 &&
	                   offsetof(struct esd_keystate, latest) == 0 &&
	                   offsetof(struct esd_keystate, dirty) == 16,
	               "latest and dirty in words 0 and 2 of three");
	const long long *stw = (const long long *)kt->st;
	const __m512i ff = _mm512_set1_epi64(0xff);
	uint32_t r = 0;
	for (; r + 8 <= count; r += 8) {
		const __m256i u = _mm256_loadu_si256((const __m256i *)(kt->sorted + r));
		const __m256i u3 = _mm256_add_epi32(_mm256_add_epi32(u, u), u);
		_mm512_storeu_si512(K + r, _mm512_i32gather_epi64(u, ukeys, 8));
		_mm512_storeu_si512(N + r, _mm512_i32gather_epi64(u, need, 8));
		_mm512_storeu_si512(L + r, _mm512_i32gather_epi64(u3, stw, 8));
		_mm512_storeu_si512(D + r,
		                    _mm512_and_si512(_mm512_i32gather_epi64(u3, stw + 2, 8), ff));
	}
	for (; r < c8; r++) {
		/* the tail, and padding that no list selects */
		const int in = r < count;
		const uint32_t u = in ? kt->sorted[r] : 0;
		K[r] = in ? kt->ukeys[u] : 0;
		N[r] = in ? kt->need[u] : 0;
		L[r] = in ? kt->st[u].latest : 0;
		D[r] = in ? kt->st[u].dirty : ESD_NO_WORKER;
	}
	const __m512i one = _mm512_set1_epi64(1);
	const __m512i outdated = _mm512_set1_epi64(ESD_ROW_OUTDATED);
	const __m512i dirty = _mm512_set1_epi64(ESD_ROW_DIRTY);
	for (uint32_t w = 0; w < n; w++) {
		const __m512i bw = _mm512_set1_epi64((long long)(UINT64_C(1) << w));
		const __m512i vw = _mm512_set1_epi64(w);
		uint32_t pw = at->ws[w], pm = at->km[w], pg = at->kg[w], pv = at->kv[w];
		for (r = 0; r < c8; r += 8) {
			const __m512i k = _mm512_loadu_si512(K + r), nd = _mm512_loadu_si512(N + r);
			const __mmask8 mw = _mm512_test_epi64_mask(nd, bw);
			const __mmask8 ml = _mm512_test_epi64_mask(_mm512_loadu_si512(L + r), bw);
			/* shared: trained by more than one worker (or full-set sync) */
			const __mmask8 ms =
			    full ? 0xff : _mm512_test_epi64_mask(nd, _mm512_sub_epi64(nd, one));
			const __mmask8 mv = _mm512_cmpeq_epi64_mask(_mm512_loadu_si512(D + r), vw) &
			                    _mm512_test_epi64_mask(nd, nd) &
			                    _mm512_cmpneq_epi64_mask(nd, bw);
			_mm512_storeu_si512(wk + pw, _mm512_maskz_compress_epi64(mw, k));
			const __m512i sv = _mm512_mask_blend_epi64(ms, dirty, outdated);
			_mm_storel_epi64((__m128i *)(ws + pw),
			                 _mm512_cvtepi64_epi8(_mm512_maskz_compress_epi64(mw, sv)));
			pw += (uint32_t)__builtin_popcount(mw);
			const __mmask8 mm = mw & ~ml, mg = mw & ms;
			_mm512_storeu_si512(km + pm, _mm512_maskz_compress_epi64(mm, k));
			pm += (uint32_t)__builtin_popcount(mm);
			_mm512_storeu_si512(kg + pg, _mm512_maskz_compress_epi64(mg, k));
			pg += (uint32_t)__builtin_popcount(mg);
			_mm512_storeu_si512(kv + pv, _mm512_maskz_compress_epi64(mv, k));
			pv += (uint32_t)__builtin_popcount(mv);
		}
		at->ws[w] = pw;
		at->km[w] = pm;
		at->kg[w] = pg;
		at->kv[w] = pv;
	}
}
#endif

/* The consequence and the per-worker lists in one pass over the keys in
 * ascending order (the snapshots' advance): every list is written into a
 * region per worker that is sure to hold it, so nothing needs counting
 * first; then the consequence's lists are packed into their layout. A
 * worker needs at most as many keys as its samples have occurrences (plus
 * the replicated ones), and at most 'count'; a holder pushes at most the
 * keys DIRTY on it. So the regions take about as many entries as the batch
 * has occurrences, whatever the number of workers.
 * Long: the step's hot pass over the batch's occurrences; its regions and counters stay in
 * registers across the loop. */
static int lists_one_pass(struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                          enum esd_sync sync, struct esd_conseq *cq, struct esd_wlists *wl)
{
	const uint32_t n = kt->n, count = kt->count;
	const struct esd_keystate *st = kt->st;
	uint64_t occj[ESD_MAX_WORKERS] = {0};
	uint32_t held[ESD_MAX_WORKERS + 1] = {0};
	for (uint32_t i = 0; i < b->k; i++)
		occj[assign[i]] += b->off[i + 1] - b->off[i]; /* assign < n: esd_keytab_need */
	for (uint32_t u = 0; u < count; u++)
		held[st[u].dirty < n ? st[u].dirty : n]++;
	uint32_t wp[ESD_MAX_WORKERS], pv[ESD_MAX_WORKERS], pm[ESD_MAX_WORKERS], pg[ESD_MAX_WORKERS];
	uint32_t vat[ESD_MAX_WORKERS];
	size_t total = 0, totv = 0;
	for (uint32_t w = 0; w < n; w++) {
		const uint64_t bound = occj[w] + kt->nrep;
		wl->start[w] = wp[w] = pm[w] = pg[w] = (uint32_t)total;
		vat[w] = pv[w] = (uint32_t)totv;
		total += bound < count ? bound : count;
		totv += held[w];
	}
	/* the vector pass's slack after each list kind (see lists_v8) */
	const size_t sl = 8;
	if (2 * total + totv + 3 * sl > UINT32_MAX)
		return -EOVERFLOW;
	if (esd_grow((void **)&wl->keys, &wl->cap, total + sl, sizeof(esd_key_t)) ||
	    esd_grow((void **)&wl->state, &wl->cap_state, total + sl, 1) ||
	    esd_grow((void **)&wl->pack, &wl->cap_pack, 2 * total + totv + 3 * sl,
	             sizeof(esd_key_t)))
		return -ENOMEM;
	const uint64_t *needs = kt->need;
	const esd_key_t *ukeys = kt->ukeys;
	const uint32_t *sorted = kt->sorted;
	const int full = sync == ESD_SYNC_FULL_SET;
	esd_key_t *wk = wl->keys, *km = wl->pack, *kg = km + total + sl, *kv = kg + total + sl;
	uint8_t *ws = wl->state;
#ifdef HAVE_LISTS_V8
	if (count && count < (1u << 29) && esd_have_avx512()) { /* 3 x count fits an int32 */
		struct lists_at at;
		for (uint32_t w = 0; w < n; w++) {
			at.ws[w] = at.km[w] = at.kg[w] = wp[w];
			at.kv[w] = pv[w];
		}
		/* vec (count x ESD_MAX_WORKERS words) is free scratch here, as
		 * for the sort */
		lists_v8(kt, full, (uint64_t *)kt->vec, wk, ws, km, kg, kv, &at);
		for (uint32_t w = 0; w < n; w++) {
			wp[w] = at.ws[w];
			pm[w] = at.km[w];
			pg[w] = at.kg[w];
			pv[w] = at.kv[w];
		}
	} else
#endif
		for (uint32_t r = 0; r < count; r++) {
			const uint32_t u = sorted[r];
			const struct esd_keystate *s = &st[u];
			const uint64_t need = needs[u], lat = s->latest;
			const esd_key_t key = ukeys[u];
			if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
				kv[pv[s->dirty]++] = key;
			const int shared = full || (need & (need - 1));
			const uint8_t state = shared ? ESD_ROW_OUTDATED : ESD_ROW_DIRTY;
			/* every list written at its next place and kept by its
			 * count: no branch on the data (the place is inside the
			 * worker's region, which holds as many entries as the
			 * worker can need) */
			for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
				const uint32_t j = (uint32_t)__builtin_ctzll(m_);
				wk[wp[j]] = key;
				ws[wp[j]++] = state;
				km[pm[j]] = key;
				pm[j] += !((lat >> j) & 1);
				kg[pg[j]] = key;
				pg[j] += (uint32_t)shared;
			}
		}
	uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	const esd_key_t *from[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	uint32_t hits = 0;
	memset(cnt, 0, sizeof(cnt));
	for (uint32_t w = 0; w < n; w++) {
		const uint32_t at = wl->start[w];
		wl->len[w] = wp[w] - at;
		cnt[ESD_CQ_MISS_PULL][w] = pm[w] - at;
		cnt[ESD_CQ_UPDATE_GRAD][w] = pg[w] - at;
		cnt[ESD_CQ_UPDATE_VALUE][w] = pv[w] - vat[w];
		from[ESD_CQ_MISS_PULL][w] = km + at;
		from[ESD_CQ_UPDATE_GRAD][w] = kg + at;
		from[ESD_CQ_UPDATE_VALUE][w] = kv + vat[w];
		hits += wl->len[w] - cnt[ESD_CQ_MISS_PULL][w];
	}
	int rc = cq_layout(cq, n, cnt);
	if (rc)
		return rc;
	static const enum esd_cq_kind packed[3] = {ESD_CQ_UPDATE_VALUE, ESD_CQ_MISS_PULL,
	                                           ESD_CQ_UPDATE_GRAD};
	for (int q = 0; q < 3; q++) {
		const enum esd_cq_kind kind = packed[q];
		for (uint32_t w = 0; w < n; w++)
			if (cnt[kind][w])
				memcpy(cq->keys[kind] + cq->off[kind][w], from[kind][w],
				       cnt[kind][w] * sizeof(esd_key_t));
	}
	cq->hits = hits;
	return 0;
}

/* Long: steps 1, 3 and 6 of the consequence in one pass over the keys, sharing the per-key
 * masks it reads once. */
static int compute(const struct esd_keytab *ckt, const struct esd_batch *b, const uint32_t *assign,
                   const int64_t *T, enum esd_sync sync, int plan_only, struct esd_conseq *cq,
                   struct esd_wlists *wl)
{
	if (!ckt || !b || !assign || !T || !cq)
		return -EINVAL;
	struct esd_keytab *kt = (struct esd_keytab *)ckt; /* scratch only */
	int rc;
	if ((rc = esd_keytab_need(kt, b, assign)) || (rc = esd_keytab_sort(kt)))
		return rc;
	if (wl && !plan_only) {
		if ((rc = lists_one_pass(kt, b, assign, sync, cq, wl)))
			return rc;
		esd_conseq_costs(cq, kt, T);
		return 0;
	}
	const uint32_t n = kt->n, count = kt->count;
	const struct esd_keystate *st = kt->st;
	const uint64_t *needs = kt->need;
	const esd_key_t *ukeys = kt->ukeys;
	const uint32_t *sorted = kt->sorted;
	const int full = sync == ESD_SYNC_FULL_SET;
	uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	uint32_t hit[ESD_MAX_WORKERS];
	memset(cnt, 0, sizeof(cnt));
	memset(hit, 0, sizeof(hit));
	uint32_t hits = 0, j;
	/* pass 1: counts */
	if (n <= 8 && !plan_only) {
		/* per-worker counts of up to 8 workers as byte lanes of one
		 * word per kind (a mask's bits spread to bytes by a multiply),
		 * flushed before a lane can overflow */
		uint64_t am = 0, ah = 0, ag = 0;
		uint32_t since = 0;
		for (uint32_t u = 0; u < count; u++) {
			const struct esd_keystate *s = &st[u];
			const uint64_t need = needs[u];
			if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
				cnt[ESD_CQ_UPDATE_VALUE][s->dirty]++;
			const uint64_t grad = full || (need & (need - 1)) ? need : 0;
			am += spread8(need & ~s->latest);
			ah += spread8(need & s->latest);
			ag += spread8(grad);
			if (++since == 255 || u + 1 == count) {
				for (uint32_t w = 0; w < n; w++) {
					cnt[ESD_CQ_MISS_PULL][w] += (uint32_t)(am >> (8 * w)) & 255;
					hit[w] += (uint32_t)(ah >> (8 * w)) & 255;
					cnt[ESD_CQ_UPDATE_GRAD][w] +=
					    (uint32_t)(ag >> (8 * w)) & 255;
				}
				am = ah = ag = 0;
				since = 0;
			}
		}
	} else {
		for (uint32_t u = 0; u < count; u++) {
			const struct esd_keystate *s = &st[u];
			const uint64_t need = needs[u];
			if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
				cnt[ESD_CQ_UPDATE_VALUE][s->dirty]++;
			if (plan_only)
				continue;
			for (uint64_t m_ = need & ~s->latest; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				cnt[ESD_CQ_MISS_PULL][j]++;
			}
			for (uint64_t m_ = need & s->latest; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				hit[j]++;
			}
			if (full || (need & (need - 1)))
				for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
					j = (uint32_t)__builtin_ctzll(m_);
					cnt[ESD_CQ_UPDATE_GRAD][j]++;
				}
		}
	}
	for (uint32_t w = 0; w < n; w++)
		hits += hit[w];
	if ((rc = cq_layout(cq, n, cnt)))
		return rc;
	uint32_t pos[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		for (uint32_t w = 0; w < n; w++)
			pos[q][w] = cq->off[q][w];
	esd_key_t *kv = cq->keys[ESD_CQ_UPDATE_VALUE], *km = cq->keys[ESD_CQ_MISS_PULL],
	          *kg = cq->keys[ESD_CQ_UPDATE_GRAD];
	uint32_t *pv = pos[ESD_CQ_UPDATE_VALUE], *pm = pos[ESD_CQ_MISS_PULL],
	         *pg = pos[ESD_CQ_UPDATE_GRAD];
	/* pass 2: fill, keys ascending */
	for (uint32_t r = 0; r < count; r++) {
		const uint32_t u = sorted[r];
		const struct esd_keystate *s = &st[u];
		const uint64_t need = needs[u];
		const esd_key_t key = ukeys[u];
		if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
			kv[pv[s->dirty]++] = key;
		if (plan_only)
			continue;
		for (uint64_t m_ = need & ~s->latest; m_; m_ &= m_ - 1) {
			j = (uint32_t)__builtin_ctzll(m_);
			km[pm[j]++] = key;
		}
		if (full || (need & (need - 1)))
			for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				kg[pg[j]++] = key;
			}
	}
	cq->hits = hits;
	esd_conseq_costs(cq, kt, T);
	return 0;
}

int esd_conseq_compute_lists(const struct esd_keytab *kt, const struct esd_batch *b,
                             const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                             struct esd_conseq *cq, struct esd_wlists *wl)
{
	return compute(kt, b, assign, T, sync, 0, cq, wl);
}

int esd_conseq_compute(const struct esd_keytab *kt, const struct esd_batch *b,
                       const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                       struct esd_conseq *cq)
{
	return compute(kt, b, assign, T, sync, 0, cq, NULL);
}

int esd_comm_plan(const struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                  const int64_t *T, struct esd_conseq *cq)
{
	return compute(kt, b, assign, T, ESD_SYNC_ON_DEMAND, 1, cq, NULL);
}
