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
 */
#include "gmac.h"

#include <errno.h>
#include <immintrin.h>
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
	gmac_setup(g, key);
	return 0;
}

/* The tag from the hash y of bytes bytes of data. */
GMAC_TARGET static void finish(const struct gmac *g, __m128i y, size_t bytes,
			       const uint8_t nonce[12], uint8_t tag[16])
{
	/* the lengths block, byte-reversed: the message's bits (none), the
	 * associated data's bits */
	__m128i lens = _mm_set_epi64x((long long)(bytes * 8), 0);
	y = absorb_few(g, y, &lens, 1);
	uint8_t j0[16];
	memcpy(j0, nonce, 12);
	j0[12] = j0[13] = j0[14] = 0;
	j0[15] = 1;
	__m128i e = aes256_block(g, _mm_loadu_si128((const __m128i *)j0));
	_mm_storeu_si128((__m128i *)tag, _mm_xor_si128(e, bswap128(y)));
}

void esd_gmac_run_start(struct gmac_run *r)
{
	memset(r, 0, sizeof(*r));
}

GMAC_TARGET void esd_gmac_run_add(const struct gmac *g, struct gmac_run *r, const uint8_t *p,
                                  size_t len, uint8_t *copy)
{
	__m128i y = _mm_loadu_si128((const __m128i *)r->y);
	r->total += len;
	if (r->part_len) { /* fill the waiting block first */
		size_t k = 16 - r->part_len < len ? 16 - r->part_len : len;
		memcpy(r->part + r->part_len, p, k);
		if (copy) {
			memcpy(copy, p, k);
			copy += k;
		}
		r->part_len += k;
		p += k;
		len -= k;
		if (r->part_len < 16)
			return;
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
	__m128i y = _mm_loadu_si128((const __m128i *)r->y);
	if (r->part_len)
		y = absorb(g, y, r->part, r->part_len, NULL);
	finish(g, y, r->total, nonce, tag);
}

GMAC_TARGET void esd_gmac_tag(const struct gmac *g, const uint8_t nonce[12], const uint8_t *head,
                              size_t head_len, const uint8_t *body, size_t body_len, uint8_t *copy,
                              uint8_t tag[16])
{
	__m128i y = _mm_setzero_si128();
	if (head_len)
		y = absorb(g, y, head, head_len, NULL);
	y = absorb(g, y, body, body_len, copy);
	finish(g, y, head_len + body_len, nonce, tag);
}
