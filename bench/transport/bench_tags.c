/*
 * The frame tag constructions a keyed link could use, side by side: GB of
 * frame tagged per second of the thread's CPU time (the host is shared:
 * CPU time is what the tag costs the link's thread), by frame size, for
 * sizes the runtime sends (a one-row pull's 64 B to a batch's 2 MiB).
 * Each row tags one frame under a key and a counter nonce, as auth.c does;
 * "/today" divides by libsodium's AES-256-GCM at 1 MiB, the links' tag
 * before transport/gmac.c.
 */
#include "bench_tags.h"

#include "gmac.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef ESD_BENCH_OPENSSL
#include <openssl/evp.h>
#endif

#define BIG (2u << 20)

struct tagger {
	const char *name;
	void (*tag)(const uint8_t *frame, size_t len);
	int on;
};

static uint8_t key[32], nonce[12], tag[16], *copy_to;
static uint64_t ctr;
static struct gmac gm, gnh;

static void next_nonce(void)
{
	ctr++;
	memcpy(nonce, &ctr, 8);
}

static void sodium_gcm(const uint8_t *f, size_t len)
{
	uint8_t none[1] = {0};
	next_nonce();
	crypto_aead_aes256gcm_encrypt_detached(none, tag, NULL, none, 0, f, len, NULL, nonce, key);
}

static void sodium_gcm_copy(const uint8_t *f, size_t len)
{
	memcpy(copy_to, f, len);
	sodium_gcm(copy_to, len);
}

static void sodium_chacha(const uint8_t *f, size_t len)
{
	uint8_t none[1] = {0};
	next_nonce();
	crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, tag, NULL, none, 0, f, len, NULL,
							   nonce, key);
}

static void esd_gmac(const uint8_t *f, size_t len)
{
	next_nonce();
	esd_gmac_tag(&gm, nonce, NULL, 0, f, len, NULL, tag);
}

static void esd_gmac_copy(const uint8_t *f, size_t len)
{
	next_nonce();
	esd_gmac_tag(&gm, nonce, NULL, 0, f, len, copy_to, tag);
}

static void nh_gmac(const uint8_t *f, size_t len)
{
	next_nonce();
	esd_gmac_tag(&gnh, nonce, NULL, 0, f, len, NULL, tag);
}

static void nh_gmac_copy(const uint8_t *f, size_t len)
{
	next_nonce();
	esd_gmac_tag(&gnh, nonce, NULL, 0, f, len, copy_to, tag);
}

/* The memif receive: a frame copied out of the ring a packet's bytes at a
 * time (PIECE), then checked (before), or hashed in the same pass (now). */
#define PIECE 8192u

static void rx_copy_then_gmac(const uint8_t *f, size_t len)
{
	for (size_t o = 0; o < len; o += PIECE)
		memcpy(copy_to + o, f + o, len - o < PIECE ? len - o : PIECE);
	next_nonce();
	esd_gmac_tag(&gm, nonce, NULL, 0, copy_to, len, NULL, tag);
}

static void rx_gmac_run(const uint8_t *f, size_t len)
{
	struct gmac_run run;
	esd_gmac_run_start(&run);
	for (size_t o = 0; o < len; o += PIECE)
		esd_gmac_run_add(&gm, &run, f + o, len - o < PIECE ? len - o : PIECE, copy_to + o);
	next_nonce();
	esd_gmac_run_end(&gm, &run, nonce, tag);
}

static void plain_copy(const uint8_t *f, size_t len)
{
	memcpy(copy_to, f, len);
	__asm__ volatile("" ::"r"(copy_to) : "memory");
}

#ifdef ESD_BENCH_OPENSSL
static EVP_CIPHER_CTX *ossl_gcm, *ossl_chacha;

/* An AEAD of the empty message with f as associated data, the context's
 * key kept and only the nonce set per frame. */
static void ossl_tag(EVP_CIPHER_CTX *c, int get_tag, const uint8_t *f, size_t len)
{
	int n;
	uint8_t none[16];
	next_nonce();
	EVP_EncryptInit_ex(c, NULL, NULL, NULL, nonce);
	EVP_EncryptUpdate(c, NULL, &n, f, (int)len);
	EVP_EncryptFinal_ex(c, none, &n);
	EVP_CIPHER_CTX_ctrl(c, get_tag, 16, tag);
}

static void openssl_gcm(const uint8_t *f, size_t len)
{
	ossl_tag(ossl_gcm, EVP_CTRL_GCM_GET_TAG, f, len);
}

static void openssl_chacha(const uint8_t *f, size_t len)
{
	ossl_tag(ossl_chacha, EVP_CTRL_AEAD_GET_TAG, f, len);
}

static int openssl_init(void)
{
	ossl_gcm = EVP_CIPHER_CTX_new();
	ossl_chacha = EVP_CIPHER_CTX_new();
	if (!ossl_gcm || !ossl_chacha ||
	    !EVP_EncryptInit_ex(ossl_gcm, EVP_aes_256_gcm(), NULL, key, nonce) ||
	    !EVP_EncryptInit_ex(ossl_chacha, EVP_chacha20_poly1305(), NULL, key, nonce))
		return -EIO;
	return 0;
}
#endif

static double cpu_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* GB of frames tagged per CPU second, for about 50 ms. */
static double rate(const struct tagger *t, const uint8_t *f, size_t len)
{
	size_t bytes = 0;
	double t0 = cpu_s(), t1;
	do {
		for (int i = 0; i < 16; i++)
			t->tag(f, len);
		bytes += 16 * len;
	} while ((t1 = cpu_s()) - t0 < 0.05);
	return (double)bytes / (t1 - t0) / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

enum { NT = 12, NS = 5, MAXREPS = 16 };
static const size_t sizes[NS] = {64, 4096, 65536, 1u << 20, BIG};

int bench_tags(int reps)
{
	struct tagger ts[NT] = {
		{"libsodium AES-256-GCM (links before gmac.c)", sodium_gcm, 1},
		{"copy + libsodium AES-256-GCM (the seal before)", sodium_gcm_copy, 1},
		{"libsodium ChaCha20-Poly1305", sodium_chacha, 1},
		{"OpenSSL EVP AES-256-GCM as GMAC", NULL, 0},
		{"OpenSSL EVP ChaCha20-Poly1305", NULL, 0},
		{"gmac.c AES-256-GCM (VPCLMULQDQ)", esd_gmac, 0},
		{"gmac.c, copying as it hashes (the seal)", esd_gmac_copy, 0},
		{"memcpy (for scale)", plain_copy, 1},
		{"memif receive before: 8 KiB copies, then gmac.c", rx_copy_then_gmac, 0},
		{"memif receive now: gmac_run copying 8 KiB pieces", rx_gmac_run, 0},
		{"gmac.c NH-GMAC (NH, 2 passes, then GHASH)", nh_gmac, 0},
		{"gmac.c NH-GMAC, copying as it hashes", nh_gmac_copy, 0},
	};
	static double r[NT][NS][MAXREPS];
	reps = reps < 1 ? 1 : reps > MAXREPS ? MAXREPS : reps;
	if (sodium_init() < 0)
		return -EIO;
	randombytes_buf(key, sizeof(key));
	ts[5].on = ts[6].on = ts[8].on = ts[9].on = !esd_gmac_init(&gm, key);
	ts[10].on = ts[11].on = !esd_gmac_init_nh(&gnh, key);
#ifdef ESD_BENCH_OPENSSL
	if (!openssl_init()) {
		ts[3].tag = openssl_gcm;
		ts[4].tag = openssl_chacha;
		ts[3].on = ts[4].on = 1;
	}
#endif
	uint8_t *f = malloc(BIG);
	copy_to = malloc(BIG);
	if (!f || !copy_to) {
		free(f);
		free(copy_to);
		return -ENOMEM;
	}
	randombytes_buf(f, BIG);
	for (int k = 0; k < reps; k++) /* constructions interleaved per repetition */
		for (int i = 0; i < NT; i++)
			for (int s = 0; s < NS && ts[i].on; s++)
				r[i][s][k] = rate(&ts[i], f, sizes[s]);
	printf("# frame tags: GB tagged per CPU second (medians of %d), by frame size\n", reps);
	printf("| construction | 64 B | 4 KiB | 64 KiB | 1 MiB | 2 MiB | /today at 1 MiB |\n");
	printf("|---|---:|---:|---:|---:|---:|---:|\n");
	double today = 0;
	for (int i = 0; i < NT; i++) {
		printf("| %s |", ts[i].name);
		if (!ts[i].on) {
			printf(" not on this build or CPU |||||\n");
			continue;
		}
		double m[NS];
		for (int s = 0; s < NS; s++) {
			qsort(r[i][s], (size_t)reps, sizeof(double), cmp_double);
			m[s] = r[i][s][reps / 2];
			printf(" %.2f |", m[s]);
		}
		if (!i)
			today = m[3];
		printf(" %.2fx |\n", m[3] / today);
	}
	free(f);
	free(copy_to);
	return 0;
}
