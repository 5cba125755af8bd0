/* gmac.c's AES-256-GCM tags against libsodium's, bit for bit: every length
 * from 0 to 1100 bytes and random ones up to 600 KiB, with and without a
 * head and a copy, under random keys and nonces (the wire's tags must not
 * depend on which side's CPU made them); and the same tags taken in pieces
 * of random lengths (gmac_run, as a wire hashes fragments). Skips (77) on
 * a CPU without VPCLMULQDQ. */
#include "testutil.h"

#include "gmac.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

enum { MAXLEN = 600 << 10 };

/* libsodium's tag of head || body. */
static void sodium_tag(const uint8_t key[32], const uint8_t nonce[12], const uint8_t *data,
		       size_t len, uint8_t tag[16])
{
	uint8_t none[1] = {0};
	crypto_aead_aes256gcm_encrypt_detached(none, tag, NULL, none, 0, data, len, NULL, nonce,
					       key);
}

static void one(uint8_t *data, uint8_t *copy, size_t len, size_t head, int with_copy)
{
	uint8_t key[32], nonce[12], want[16], got[16];
	struct gmac g;
	randombytes_buf(key, sizeof(key));
	randombytes_buf(nonce, sizeof(nonce));
	randombytes_buf(data, len);
	assert_int_equal(esd_gmac_init(&g, key), 0);
	sodium_tag(key, nonce, data, len, want);
	memset(copy, 0, len);
	esd_gmac_tag(&g, nonce, data, head, data + head, len - head, with_copy ? copy + head : NULL,
	             got);
	if (memcmp(want, got, 16))
		fail_msg("tag differs from libsodium's: %zu bytes, head %zu, copy %d", len, head,
			 with_copy);
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
	assert_int_equal(esd_gmac_init(&g, key), 0);
	sodium_tag(key, nonce, data, len, want);
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
	esd_gmac_run_end(&g, &r, nonce, got);
	if (memcmp(want, got, 16))
		fail_msg("tag in pieces differs from libsodium's: %zu bytes, copy %d", len,
			 with_copy);
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
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_tags),
					   cmocka_unit_test(test_pieces)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
