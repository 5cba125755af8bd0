/*
 * GMAC with AES-NI and VPCLMULQDQ (gmac.h).
 *
 * GHASH runs on byte-reversed blocks (the reflected field representation of
 * Intel's carry-less multiplication white paper): a product is four 64-bit
 * carry-less multiplies, a shift left by one and a reduction modulo
 * x^128 + x^7 + x^2 + x + 1. The shift and the reduction are linear, so
 * sixteen blocks are multiplied by H^16..H^1, their unreduced products
 * summed and reduced once; two blocks share each 256-bit multiply, and
 * each product takes three of them (Karatsuba) rather than four.
 *
 * NH-GMAC (gmac.h) puts NH in front of GHASH: a 1 KiB chunk becomes 32
 * bytes, so GHASH's multiplies fall by 32 and the time goes to NH, four
 * additions and multiplies of 32-bit words per 16 bytes a pass, two 16-byte
 * units per 256-bit register (vpmuludq).
 */
#include "gmac.h"

#include <errno.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define GMAC_TARGET __attribute__((target("aes,pclmul,ssse3,sse4.1,avx2,vpclmulqdq")))

int esd_gmac_available(void)
{
	const char *no = getenv("ESD_NO_VPCLMUL");
	if (no && *no && strcmp(no, "0"))
		return 0;
	__builtin_cpu_init();
	return __builtin_cpu_supports("aes") && __builtin_cpu_supports("pclmul") &&
	       __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq");
}

GMAC_TARGET static inline __m128i bswap128(__m128i x)
{
	return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* (hi:lo) ^ mid in the middle, shifted left by one and reduced. */
GMAC_TARGET static inline __m128i reduce(__m128i lo, __m128i mid, __m128i hi)
{
	__m128i a = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
	__m128i b = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
	/* the 256-bit a:b shifted left by one */
	__m128i ca = _mm_srli_epi32(a, 31), cb = _mm_srli_epi32(b, 31);
	a = _mm_slli_epi32(a, 1);
	b = _mm_slli_epi32(b, 1);
	__m128i top = _mm_srli_si128(ca, 12);
	cb = _mm_slli_si128(cb, 4);
	ca = _mm_slli_si128(ca, 4);
	a = _mm_or_si128(a, ca);
	b = _mm_or_si128(_mm_or_si128(b, cb), top);
	/* the reduction */
	__m128i t = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(a, 31), _mm_slli_epi32(a, 30)),
				  _mm_slli_epi32(a, 25));
	__m128i t2 = _mm_srli_si128(t, 4);
	a = _mm_xor_si128(a, _mm_slli_si128(t, 12));
	__m128i u = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(a, 1), _mm_srli_epi32(a, 2)),
				  _mm_srli_epi32(a, 7));
	u = _mm_xor_si128(u, t2);
	a = _mm_xor_si128(a, u);
	return _mm_xor_si128(b, a);
}

GMAC_TARGET static inline void mul_acc(__m128i x, __m128i h, __m128i *lo, __m128i *mid,
				       __m128i *hi)
{
	*lo = _mm_xor_si128(*lo, _mm_clmulepi64_si128(x, h, 0x00));
	*hi = _mm_xor_si128(*hi, _mm_clmulepi64_si128(x, h, 0x11));
	*mid = _mm_xor_si128(*mid, _mm_xor_si128(_mm_clmulepi64_si128(x, h, 0x10),
						   _mm_clmulepi64_si128(x, h, 0x01)));
}

GMAC_TARGET static __m128i gf_mul(__m128i a, __m128i b)
{
	__m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
	mul_acc(a, b, &lo, &mid, &hi);
	return reduce(lo, mid, hi);
}

GMAC_TARGET static inline __m128i hpow(const struct gmac *g, size_t k)
{
	return _mm_loadu_si128((const __m128i *)g->h[k - 1]);
}

/* y = (y ^ x[0]) H^n ^ x[1] H^(n-1) ^ ... ^ x[n-1] H, for n <= GMAC_POWERS
 * byte-reversed blocks. */
GMAC_TARGET static __m128i absorb_few(const struct gmac *g, __m128i y, const __m128i *x, size_t n)
{
	__m128i lo = _mm_setzero_si128(), mid = lo, hi = lo;
	if (!n)
		return y;
	mul_acc(_mm_xor_si128(y, x[0]), hpow(g, n), &lo, &mid, &hi);
	for (size_t i = 1; i < n; i++)
		mul_acc(x[i], hpow(g, n - i), &lo, &mid, &hi);
	return reduce(lo, mid, hi);
}

/* The wide loop: GMAC_POWERS blocks of p per step, for steps steps; with
 * copy, each block is stored there too. */
GMAC_TARGET static __m128i absorb_wide(const struct gmac *g, __m128i y, const uint8_t *p,
				       size_t steps, uint8_t *copy)
{
	if (!steps)
		return y;
	const __m256i rev = _mm256_broadcastsi128_si256(
		_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
	__m256i hp[GMAC_POWERS / 2];
	for (int j = 0; j < GMAC_POWERS / 2; j++) /* lanes: H^(16-2j), H^(15-2j) */
		hp[j] = _mm256_set_m128i(hpow(g, GMAC_POWERS - 1 - 2 * j),
					 hpow(g, GMAC_POWERS - 2 * j));
	__m256i hk[GMAC_POWERS / 2]; /* both halves of each power xored: Karatsuba */
	for (int j = 0; j < GMAC_POWERS / 2; j++)
		hk[j] = _mm256_xor_si256(hp[j], _mm256_shuffle_epi32(hp[j], 0x4e));
	for (size_t s = 0; s < steps; s++, p += 16 * GMAC_POWERS) {
		__m256i lo = _mm256_setzero_si256(), mid = lo, hi = lo;
#pragma GCC unroll 8
		for (int j = 0; j < GMAC_POWERS / 2; j++) {
			__m256i raw = _mm256_loadu_si256((const __m256i *)(p + 32 * j));
			if (copy)
				_mm256_storeu_si256((__m256i *)(copy + 32 * j), raw);
			__m256i x = _mm256_shuffle_epi8(raw, rev);
			if (!j)
				x = _mm256_xor_si256(x, _mm256_set_m128i(_mm_setzero_si128(), y));
			lo = _mm256_xor_si256(lo, _mm256_clmulepi64_epi128(x, hp[j], 0x00));
			hi = _mm256_xor_si256(hi, _mm256_clmulepi64_epi128(x, hp[j], 0x11));
			__m256i xk = _mm256_xor_si256(x, _mm256_shuffle_epi32(x, 0x4e));
			mid = _mm256_xor_si256(mid, _mm256_clmulepi64_epi128(xk, hk[j], 0x00));
		}
		mid = _mm256_xor_si256(mid, _mm256_xor_si256(lo, hi));
		if (copy)
			copy += 16 * GMAC_POWERS;
		y = reduce(_mm_xor_si128(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)),
			   _mm_xor_si128(_mm256_castsi256_si128(mid),
					 _mm256_extracti128_si256(mid, 1)),
			   _mm_xor_si128(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1)));
	}
	return y;
}

/* len bytes of p (a partial last block zero-padded), copied to copy when
 * set. */
GMAC_TARGET static __m128i absorb(const struct gmac *g, __m128i y, const uint8_t *p, size_t len,
				  uint8_t *copy)
{
	size_t steps = len / (16 * GMAC_POWERS);
	y = absorb_wide(g, y, p, steps, copy);
	size_t done = steps * 16 * GMAC_POWERS;
	p += done;
	len -= done;
	if (copy) {
		memcpy(copy + done, p, len);
	}
	__m128i x[GMAC_POWERS];
	size_t n = 0;
	for (; len >= 16; len -= 16, p += 16)
		x[n++] = bswap128(_mm_loadu_si128((const __m128i *)p));
	if (len) {
		uint8_t last[16] = {0};
		memcpy(last, p, len);
		x[n++] = bswap128(_mm_loadu_si128((const __m128i *)last));
	}
	return absorb_few(g, y, x, n);
}

#define EXPAND_A(i, rcon)                                                                  \
	do {                                                                               \
		__m128i t = _mm_shuffle_epi32(_mm_aeskeygenassist_si128(k[i - 1], rcon), 0xff); \
		k[i] = shift_xor(k[i - 2], t);                                             \
	} while (0)
#define EXPAND_B(i)                                                                        \
	do {                                                                               \
		__m128i t = _mm_shuffle_epi32(_mm_aeskeygenassist_si128(k[i - 1], 0), 0xaa);    \
		k[i] = shift_xor(k[i - 2], t);                                             \
	} while (0)

GMAC_TARGET static inline __m128i shift_xor(__m128i k, __m128i t)
{
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	return _mm_xor_si128(k, t);
}

GMAC_TARGET static void aes256_expand(const uint8_t key[32], __m128i k[15])
{
	k[0] = _mm_loadu_si128((const __m128i *)key);
	k[1] = _mm_loadu_si128((const __m128i *)(key + 16));
	EXPAND_A(2, 0x01); EXPAND_B(3);
	EXPAND_A(4, 0x02); EXPAND_B(5);
	EXPAND_A(6, 0x04); EXPAND_B(7);
	EXPAND_A(8, 0x08); EXPAND_B(9);
	EXPAND_A(10, 0x10); EXPAND_B(11);
	EXPAND_A(12, 0x20); EXPAND_B(13);
	EXPAND_A(14, 0x40);
}

GMAC_TARGET static __m128i aes256_block(const struct gmac *g, __m128i x)
{
	x = _mm_xor_si128(x, _mm_loadu_si128((const __m128i *)g->rk[0]));
	for (int i = 1; i < 14; i++)
		x = _mm_aesenc_si128(x, _mm_loadu_si128((const __m128i *)g->rk[i]));
	return _mm_aesenclast_si128(x, _mm_loadu_si128((const __m128i *)g->rk[14]));
}

GMAC_TARGET static void gmac_setup(struct gmac *g, const uint8_t key[32])
{
	__m128i k[15];
	aes256_expand(key, k);
	for (int i = 0; i < 15; i++)
		_mm_storeu_si128((__m128i *)g->rk[i], k[i]);
	__m128i h = bswap128(aes256_block(g, _mm_setzero_si128())), p = h;
	for (int i = 0; i < GMAC_POWERS; i++) {
		_mm_storeu_si128((__m128i *)g->h[i], p);
		p = gf_mul(p, h);
	}
	memset(k, 0, sizeof(k));
}

int esd_gmac_init(struct gmac *g, const uint8_t key[32])
{
	if (!esd_gmac_available())
		return -ENOTSUP;
	memset(g, 0, sizeof(*g));
	gmac_setup(g, key);
	return 0;
}

/* The tag from the hash y of bytes bytes of data (nonce NULL: the hash
 * alone, esd_gmac_mask to come). */
GMAC_TARGET static void finish(const struct gmac *g, __m128i y, size_t bytes,
			       const uint8_t nonce[12], uint8_t tag[16])
{
	/* the lengths block, byte-reversed: the message's bits (none), the
	 * associated data's bits */
	__m128i lens = _mm_set_epi64x((long long)(bytes * 8), 0);
	y = absorb_few(g, y, &lens, 1);
	_mm_storeu_si128((__m128i *)tag, bswap128(y));
	if (nonce)
		esd_gmac_mask(g, nonce, tag);
}

GMAC_TARGET void esd_gmac_mask(const struct gmac *g, const uint8_t nonce[12], uint8_t tag[16])
{
	uint8_t j0[16];
	memcpy(j0, nonce, 12);
	j0[12] = j0[13] = j0[14] = 0;
	j0[15] = 1;
	__m128i e = aes256_block(g, _mm_loadu_si128((const __m128i *)j0));
	_mm_storeu_si128((__m128i *)tag, _mm_xor_si128(e, _mm_loadu_si128((const __m128i *)tag)));
}

/* ---- NH-GMAC ------------------------------------------------------------ */

void esd_nh_ref(const uint32_t key[NH_KEY_WORDS], const uint8_t *p, size_t len,
                uint8_t out[NH_OUT])
{
	uint64_t s[NH_PASSES] = {0};
	for (size_t u = 0; u < len / 16; u++, p += 16) {
		uint32_t m[4];
		for (int i = 0; i < 4; i++)
			m[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
			       (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
		const uint32_t *k = key + 4 * u;
		for (int j = 0; j < NH_PASSES; j++) {
			s[j] += (uint64_t)(uint32_t)(m[0] + k[4 * j]) * (uint32_t)(m[2] + k[4 * j + 2]);
			s[j] += (uint64_t)(uint32_t)(m[1] + k[4 * j + 1]) *
				(uint32_t)(m[3] + k[4 * j + 3]);
		}
	}
	for (int j = 0; j < NH_PASSES; j++)
		for (int i = 0; i < 8; i++)
			out[8 * j + i] = (uint8_t)(s[j] >> (8 * i));
}

/* NH's sums s over n 16-byte units of p under the key words k (k0 k2 k1 k3
 * order); with copy, the units are stored there too. Two units a register:
 * each is shuffled to m0 m2 m1 m3, the key added, and vpmuludq multiplies
 * each even word by the odd one above it. */
#if NH_PASSES != 2
#error "the vector NH below runs two passes"
#endif

/* One 256-bit step of NH over two units at p: the key words k (k0 k2 k1 k3
 * order) added, each even word multiplied by the odd one above it (m0 m2
 * m1 m3 after the shuffle), into the two passes' sums a0 and a1. */
#define NH_STEP(p, k, copy, a0, a1)                                                         \
	do {                                                                                 \
		/* lddqu: unaligned 256-bit loads the compiler does not split */              \
		__m256i raw_ = _mm256_lddqu_si256((const __m256i *)(p));                      \
		if (copy)                                                                    \
			_mm256_storeu_si256((__m256i *)(copy), raw_);                         \
		__m256i m_ = _mm256_shuffle_epi32(raw_, 0xd8);                                \
		__m256i t0_ = _mm256_add_epi32(m_, _mm256_lddqu_si256((const __m256i *)(k)));  \
		__m256i t1_ = _mm256_add_epi32(m_, _mm256_lddqu_si256((const __m256i *)((k) + 4))); \
		a0 = _mm256_add_epi64(a0, _mm256_mul_epu32(t0_, _mm256_srli_epi64(t0_, 32))); \
		a1 = _mm256_add_epi64(a1, _mm256_mul_epu32(t1_, _mm256_srli_epi64(t1_, 32))); \
	} while (0)

/* The two passes' sums, lane by lane, as one 128-bit value: s0 s1. */
GMAC_TARGET static inline __m128i nh_fold(__m256i a0, __m256i a1)
{
	__m256i t = _mm256_add_epi64(_mm256_unpacklo_epi64(a0, a1), _mm256_unpackhi_epi64(a0, a1));
	return _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

/* NH's sums s over n 16-byte units of p under the key words k; with copy,
 * the units are stored there too. */
GMAC_TARGET static void nh_units(const uint32_t *k, const uint8_t *p, size_t n, uint8_t *copy,
				 uint64_t s[NH_PASSES])
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0;
	for (; n >= 2; n -= 2, p += 32, k += 8) {
		NH_STEP(p, k, copy, a0, a1);
		if (copy)
			copy += 32;
	}
	__m128i sum = nh_fold(a0, a1);
	if (n) {
		__m128i raw = _mm_loadu_si128((const __m128i *)p);
		if (copy)
			_mm_storeu_si128((__m128i *)copy, raw);
		__m128i m = _mm_shuffle_epi32(raw, 0xd8);
		__m128i t0 = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)k));
		__m128i t1 = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)(k + 4)));
		__m128i p0 = _mm_mul_epu32(t0, _mm_srli_epi64(t0, 32));
		__m128i p1 = _mm_mul_epu32(t1, _mm_srli_epi64(t1, 32));
		sum = _mm_add_epi64(sum, _mm_add_epi64(_mm_unpacklo_epi64(p0, p1),
						       _mm_unpackhi_epi64(p0, p1)));
	}
	uint64_t q[2];
	_mm_storeu_si128((__m128i *)q, sum);
	s[0] += q[0];
	s[1] += q[1];
}

/* NH of the whole chunk at p (its NH_OUT bytes), copied to copy when
 * set. */
GMAC_TARGET static inline __m128i nh_chunk(const uint32_t *k, const uint8_t *p, uint8_t *copy)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0;
#pragma GCC unroll 4
	for (size_t i = 0; i < NH_CHUNK; i += 32, k += 8)
		NH_STEP(p + i, k, copy ? copy + i : NULL, a0, a1);
	return nh_fold(a0, a1);
}

/* The open chunk is whole (or the last): its NH output into GHASH. */
GMAC_TARGET static void nh_chunk_end(const struct gmac *g, struct gmac_run *r)
{
	uint8_t out[NH_OUT];
	for (int j = 0; j < NH_PASSES; j++) {
		memcpy(out + 8 * j, &r->sums[j], 8); /* little-endian */
		r->sums[j] = 0;
	}
	__m128i y = _mm_loadu_si128((const __m128i *)r->y);
	_mm_storeu_si128((__m128i *)r->y, absorb(g, y, out, sizeof(out), NULL));
	r->units = 0;
}

/* n whole units of p into the run's chunks (copied to copy when set). */
GMAC_TARGET static void nh_absorb(const struct gmac *g, struct gmac_run *r, const uint8_t *p,
				  size_t n, uint8_t *copy)
{
	while (n) {
		if (!r->units && n >= NH_CHUNK / 16) { /* whole chunks: GHASH them 16 at once */
			uint8_t out[NH_OUT * GMAC_POWERS];
			size_t c = n / (NH_CHUNK / 16);
			c = c < GMAC_POWERS ? c : GMAC_POWERS;
			for (size_t i = 0; i < c; i++, p += NH_CHUNK) {
				_mm_storeu_si128((__m128i *)(out + NH_OUT * i), nh_chunk(g->nhk, p, copy));
				if (copy)
					copy += NH_CHUNK;
			}
			__m128i y = _mm_loadu_si128((const __m128i *)r->y);
			_mm_storeu_si128((__m128i *)r->y, absorb(g, y, out, NH_OUT * c, NULL));
			n -= c * (NH_CHUNK / 16);
			continue;
		}
		size_t room = NH_CHUNK / 16 - r->units, k = n < room ? n : room;
		nh_units(g->nhk + 4 * r->units, p, k, copy, r->sums);
		r->units += k;
		p += 16 * k;
		if (copy)
			copy += 16 * k;
		n -= k;
		if (r->units == NH_CHUNK / 16)
			nh_chunk_end(g, r);
	}
}

/* Move the first bytes of p into the run's waiting 16-byte unit (and to
 * *copy when set), advancing p, len and copy; whether the unit is full. */
static bool fill_part(struct gmac_run *r, const uint8_t **p, size_t *len, uint8_t **copy)
{
	size_t k = 16 - r->part_len < *len ? 16 - r->part_len : *len;
	memcpy(r->part + r->part_len, *p, k);
	if (*copy) {
		memcpy(*copy, *p, k);
		*copy += k;
	}
	r->part_len += k;
	*p += k;
	*len -= k;
	return r->part_len == 16;
}

GMAC_TARGET static void nh_run_add(const struct gmac *g, struct gmac_run *r, const uint8_t *p,
				   size_t len, uint8_t *copy)
{
	if (!len)
		return;
	r->total += len;
	if (r->part_len) { /* fill the waiting unit first */
		if (!fill_part(r, &p, &len, &copy))
			return;
		nh_absorb(g, r, r->part, 1, NULL);
		r->part_len = 0;
	}
	size_t whole = len & ~(size_t)15;
	nh_absorb(g, r, p, whole / 16, copy);
	r->part_len = len - whole;
	memcpy(r->part, p + whole, r->part_len);
	if (copy)
		memcpy(copy + whole, p + whole, r->part_len);
}

/* The run's NH outputs, then the frame's length block (its bytes as a
 * little-endian 64-bit number, eight zero bytes), hashed and finished as
 * GMAC's tag of them. */
GMAC_TARGET static void nh_run_end(const struct gmac *g, struct gmac_run *r,
				   const uint8_t nonce[12], uint8_t tag[16])
{
	if (r->part_len) { /* the last unit zero-padded */
		memset(r->part + r->part_len, 0, 16 - r->part_len);
		nh_absorb(g, r, r->part, 1, NULL);
		r->part_len = 0;
	}
	if (r->units)
		nh_chunk_end(g, r);
	uint8_t len[16] = {0};
	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)((uint64_t)r->total >> (8 * i));
	__m128i y = absorb(g, _mm_loadu_si128((const __m128i *)r->y), len, sizeof(len), NULL);
	size_t chunks = (r->total + NH_CHUNK - 1) / NH_CHUNK;
	finish(g, y, chunks * NH_OUT + sizeof(len), nonce, tag);
}

/* NH's key: the AES-256-GCM keystream of the nonce NH_KEY_NONCE (AES-256
 * of that nonce followed by the 32-bit big-endian counters 2, 3, ...),
 * read as little-endian words; each group of four stored k0 k2 k1 k3. A
 * frame's nonce never has it (bytes 8 to 10 are zero). */
GMAC_TARGET static void nh_key(struct gmac *g)
{
	uint32_t w[(NH_KEY_WORDS + 3) / 4 * 4];
	for (uint32_t i = 0; i < sizeof(w) / 16; i++) {
		uint8_t in[16];
		memset(in, NH_KEY_NONCE_BYTE, 12);
		in[12] = (uint8_t)((i + 2) >> 24);
		in[13] = (uint8_t)((i + 2) >> 16);
		in[14] = (uint8_t)((i + 2) >> 8);
		in[15] = (uint8_t)(i + 2);
		_mm_storeu_si128((__m128i *)(w + 4 * i),
				 aes256_block(g, _mm_loadu_si128((const __m128i *)in)));
	}
	for (size_t i = 0; i < NH_KEY_WORDS; i += 4) {
		g->nhk[i] = w[i];
		g->nhk[i + 1] = w[i + 2];
		g->nhk[i + 2] = w[i + 1];
		g->nhk[i + 3] = w[i + 3];
	}
	memset(w, 0, sizeof(w));
}

int esd_gmac_init_nh(struct gmac *g, const uint8_t key[32])
{
	int rc = esd_gmac_init(g, key);
	if (rc)
		return rc;
	nh_key(g);
	g->nh = 1;
	return 0;
}

void esd_gmac_run_start(struct gmac_run *r)
{
	memset(r, 0, sizeof(*r));
}

GMAC_TARGET void esd_gmac_run_add(const struct gmac *g, struct gmac_run *r, const uint8_t *p,
                                  size_t len, uint8_t *copy)
{
	if (g->nh) {
		nh_run_add(g, r, p, len, copy);
		return;
	}
	__m128i y = _mm_loadu_si128((const __m128i *)r->y);
	r->total += len;
	if (r->part_len) { /* fill the waiting block first */
		if (!fill_part(r, &p, &len, &copy))
			return; /* y unchanged */
		y = absorb(g, y, r->part, 16, NULL);
		r->part_len = 0;
	}
	size_t whole = len & ~(size_t)15;
	y = absorb(g, y, p, whole, copy);
	_mm_storeu_si128((__m128i *)r->y, y);
	r->part_len = len - whole;
	memcpy(r->part, p + whole, r->part_len);
	if (copy)
		memcpy(copy + whole, p + whole, r->part_len);
}

GMAC_TARGET void esd_gmac_run_end(const struct gmac *g, const struct gmac_run *r,
                                  const uint8_t nonce[12], uint8_t tag[16])
{
	if (g->nh) {
		struct gmac_run end = *r;
		nh_run_end(g, &end, nonce, tag);
		return;
	}
	__m128i y = _mm_loadu_si128((const __m128i *)r->y);
	if (r->part_len)
		y = absorb(g, y, r->part, r->part_len, NULL);
	finish(g, y, r->total, nonce, tag);
}

GMAC_TARGET void esd_gmac_tag(const struct gmac *g, const uint8_t nonce[12], const uint8_t *head,
                              size_t head_len, const uint8_t *body, size_t body_len, uint8_t *copy,
                              uint8_t tag[16])
{
	if (g->nh) {
		struct gmac_run r;
		esd_gmac_run_start(&r);
		nh_run_add(g, &r, head, head_len, NULL);
		nh_run_add(g, &r, body, body_len, copy);
		nh_run_end(g, &r, nonce, tag);
		return;
	}
	__m128i y = _mm_setzero_si128();
	if (head_len)
		y = absorb(g, y, head, head_len, NULL);
	y = absorb(g, y, body, body_len, copy);
	finish(g, y, head_len + body_len, nonce, tag);
}
