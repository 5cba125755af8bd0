/* gmac.c's AES-256-GCM tags against libsodium's, bit for bit: every length
 * from 0 to 1100 bytes and random ones up to 600 KiB, with and without a
 * head and a copy, under random keys and nonces (the wire's tags must not
 * depend on which side's CPU made them); and the same tags taken in pieces
 * of random lengths (gmac_run, as a wire hashes fragments). NH-GMAC the
 * same way against a reference built from the portable NH (esd_nh_ref,
 * itself held to Adiantum's published NH vectors) and libsodium's
 * AES-256-GCM, as gmac.h defines it. Skips (77) on a CPU without
 * VPCLMULQDQ. */
#include "testutil.h"

#include "gmac.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

enum { MAXLEN = 600 << 10 };

/* libsodium's AES-256-GCM tag of the associated data data[0..len). */
static void gcm_tag(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *data,
		    size_t len, uint8_t tag[16])
{
	uint8_t none[1] = {0};
	crypto_aead_aes256gcm_encrypt_detached(none, tag, NULL, none, 0, data, len, NULL, nonce,
					       key);
}

/* NH-GMAC's tag by its definition (gmac.h): NH's key the GCM keystream
 * under the nonce of 0xff bytes, NH of each 1 KiB chunk (the last padded
 * with zeros to 16 bytes), then the frame's length block, and the GCM tag
 * of all that as associated data. */
static void nh_gmac_ref(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *data,
			size_t len, uint8_t tag[16])
{
	static uint8_t nhk[4 * NH_KEY_WORDS], zero[4 * NH_KEY_WORDS], ad[NH_OUT * 700 + 16];
	uint8_t knonce[12], last[NH_CHUNK];
	uint32_t kw[NH_KEY_WORDS];
	memset(knonce, NH_KEY_NONCE_BYTE, sizeof(knonce));
	crypto_aead_aes256gcm_encrypt_detached(nhk, last, NULL, zero, sizeof(zero), NULL, 0, NULL,
					       knonce, key);
	memcpy(kw, nhk, sizeof(kw)); /* little-endian words */
	size_t n = 0;
	for (size_t off = 0; off < len; off += NH_CHUNK, n += NH_OUT) {
		size_t k = len - off < NH_CHUNK ? len - off : NH_CHUNK;
		memset(last, 0, sizeof(last));
		memcpy(last, data + off, k);
		assert_true(n + NH_OUT + 16 <= sizeof(ad));
		esd_nh_ref(kw, last, (k + 15) & ~(size_t)15, ad + n);
	}
	memset(ad + n, 0, 16);
	for (int i = 0; i < 8; i++)
		ad[n + i] = (uint8_t)((uint64_t)len >> (8 * i));
	gcm_tag(key, nonce, ad, n + 16, tag);
}

static int nh_mode; /* the tests below run NH-GMAC, else GMAC */

static void ref_tag(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *data,
		    size_t len, uint8_t tag[16])
{
	if (nh_mode)
		nh_gmac_ref(key, nonce, data, len, tag);
	else
		gcm_tag(key, nonce, data, len, tag);
}

static int init(struct gmac *g, const uint8_t key[32])
{
	return nh_mode ? esd_gmac_init_nh(g, key) : esd_gmac_init(g, key);
}

static void one(uint8_t *data, uint8_t *copy, size_t len, size_t head, int with_copy)
{
	uint8_t key[32], nonce[12], want[16], got[16];
	struct gmac g;
	randombytes_buf(key, sizeof(key));
	randombytes_buf(nonce, sizeof(nonce));
	randombytes_buf(data, len);
	assert_int_equal(init(&g, key), 0);
	ref_tag(key, nonce, data, len, want);
	memset(copy, 0, len);
	esd_gmac_tag(&g, nonce, data, head, data + head, len - head, with_copy ? copy + head : NULL,
	             got);
	if (memcmp(want, got, 16))
		fail_msg("tag differs from the reference: %zu bytes, head %zu, copy %d, NH %d", len,
			 head, with_copy, nh_mode);
	if (with_copy && memcmp(copy + head, data + head, len - head))
		fail_msg("copy differs: %zu bytes, head %zu", len, head);
}

static void test_same_tags(void **state)
{
	(void)state;
	uint8_t *data = malloc(MAXLEN), *copy = malloc(MAXLEN);
	assert_non_null(data);
	assert_non_null(copy);
	for (size_t len = 0; len <= 1100; len++)
		one(data, copy, len, len >= 32 && len % 3 == 0 ? 32 : 0, len & 1);
	for (int i = 0; i < 200; i++) {
		size_t len = 32 + randombytes_uniform(i & 1 ? MAXLEN - 32 : 9000);
		one(data, copy, len, i % 3 ? 32 : 0, i & 2);
	}
	free(data);
	free(copy);
}

/* The tag of data[0..len) added in random pieces (some empty, some of a
 * byte, some of many blocks), copied or not, against libsodium's. */
static void pieces(uint8_t *data, uint8_t *copy, size_t len, int with_copy)
{
	uint8_t key[32], nonce[12], want[16], got[16];
	struct gmac g;
	struct gmac_run r;
	randombytes_buf(key, sizeof(key));
	randombytes_buf(nonce, sizeof(nonce));
	randombytes_buf(data, len);
	assert_int_equal(init(&g, key), 0);
	ref_tag(key, nonce, data, len, want);
	memset(copy, 0, len);
	esd_gmac_run_start(&r);
	for (size_t off = 0; off < len;) {
		uint32_t kind = randombytes_uniform(4);
		size_t k = kind == 0 ? 0 : kind == 1 ? 1 + randombytes_uniform(17)
					 : 1 + randombytes_uniform(kind == 2 ? 600 : 9000);
		if (k > len - off)
			k = len - off;
		esd_gmac_run_add(&g, &r, data + off, k, with_copy ? copy + off : NULL);
		off += k;
	}
	if (len & 1) { /* the hash alone, then masked under the nonce */
		esd_gmac_run_end(&g, &r, NULL, got);
		esd_gmac_mask(&g, nonce, got);
	} else {
		esd_gmac_run_end(&g, &r, nonce, got);
	}
	if (memcmp(want, got, 16))
		fail_msg("tag in pieces differs from the reference: %zu bytes, copy %d, NH %d",
			 len, with_copy, nh_mode);
	if (with_copy && memcmp(copy, data, len))
		fail_msg("copy in pieces differs: %zu bytes", len);
}

static void test_pieces(void **state)
{
	(void)state;
	uint8_t *data = malloc(MAXLEN), *copy = malloc(MAXLEN);
	assert_non_null(data);
	assert_non_null(copy);
	for (size_t len = 0; len <= 600; len++)
		pieces(data, copy, len, len & 1);
	for (int i = 0; i < 100; i++)
		pieces(data, copy, randombytes_uniform(i & 1 ? MAXLEN : 40000), i & 2);
	free(data);
	free(copy);
}

/* NH against Adiantum's published NH vectors (its benchmark's
 * nh_testvecs.h, the first two): a 16-byte message uses the key's first
 * 16 + 16 * (passes - 1) bytes, and the first passes' sums are the first
 * bytes of the 4-pass hash. */
static void test_nh_vectors(void **state)
{
	(void)state;
	static const char *vec[][3] = {
		{"225b80c81805370976144b67c4507f2b2cff56c5d566456835e6d29ae5d0c1fb"
		 "ac59811a60b03d814ba35ba9ccb3fe2dc24dd926ad36cf8c05113b8a991581c8",
		 "d382e70435ccf7a4f9b2c5ed5ad958eb",
		 "41d9ad545a0dcc5348f64c75435ddd77daca7dec913b53165c4b58dc700a7b37"},
		{"8ff494d9ab84855cf7e0b49e91bb45730888e3330d442d7a1cec01a62955df49"
		 "f58698a1d54eaf42d4d473f6f62bad71d7ddb7d0099061f0366618dc21ab067c",
		 "4013e1d667601466f5c0956a1cd1e6d8",
		 "fe06ecd265254f400c83487516f7281fd58a7c180cb6d45e8d8a4dad8ebdf44a"},
	};
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		uint8_t kb[64], m[16], want[32], got[NH_OUT];
		uint32_t key[NH_KEY_WORDS] = {0};
		assert_int_equal(sodium_hex2bin(kb, sizeof(kb), vec[i][0], 128, NULL, NULL, NULL), 0);
		assert_int_equal(sodium_hex2bin(m, sizeof(m), vec[i][1], 32, NULL, NULL, NULL), 0);
		assert_int_equal(sodium_hex2bin(want, sizeof(want), vec[i][2], 64, NULL, NULL, NULL),
				 0);
		memcpy(key, kb, 16 * NH_PASSES);
		esd_nh_ref(key, m, sizeof(m), got);
		assert_memory_equal(got, want, NH_OUT);
	}
}

static void test_nh_same_tags(void **state)
{
	nh_mode = 1;
	test_same_tags(state);
	nh_mode = 0;
}

static void test_nh_pieces(void **state)
{
	nh_mode = 1;
	test_pieces(state);
	nh_mode = 0;
}

int main(void)
{
	if (sodium_init() < 0)
		return 1;
	if (!esd_gmac_available()) {
		fprintf(stderr, "skip: this CPU has no VPCLMULQDQ/AVX2 (or ESD_NO_VPCLMUL is set)\n");
		return 77;
	}
	if (!crypto_aead_aes256gcm_is_available()) {
		fprintf(stderr, "skip: libsodium runs no AES-256-GCM on this CPU\n");
		return 77;
	}
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_tags), cmocka_unit_test(test_pieces),
		cmocka_unit_test(test_nh_vectors), cmocka_unit_test(test_nh_same_tags),
		cmocka_unit_test(test_nh_pieces)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
