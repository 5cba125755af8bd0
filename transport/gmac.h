/*
 * GMAC: the AES-256-GCM tag of an empty message with the data as associated
 * data, computed with AES-NI and a GHASH that takes two blocks per carry-less
 * multiply (VPCLMULQDQ on 256-bit registers, with AVX2). Its tags are
 * bit-identical to any AES-256-GCM implementation's (auth.c's libsodium
 * path): only the speed differs. Where the CPU lacks these units
 * esd_gmac_init() says so and auth.c keeps libsodium's code.
 */
#ifndef ESD_TRANSPORT_GMAC_H
#define ESD_TRANSPORT_GMAC_H

#include <stddef.h>
#include <stdint.h>

#define GMAC_POWERS 16 /* blocks per step of the wide loop */

/*
 * NH-GMAC (esd_gmac_init_nh): the frame is cut into chunks of NH_CHUNK
 * bytes (the last zero-padded to 16), each hashed by NH (Adiantum's:
 * 32-bit words, NH_PASSES passes under keys 16 bytes apart, 8 bytes a pass)
 * into NH_OUT bytes; the tag is the AES-256-GCM tag (empty message) with
 * those outputs and a block of the frame's length as associated data, under
 * the frame's nonce. NH's key is the same key's GCM keystream under the
 * nonce of twelve NH_KEY_NONCE_BYTE bytes. docs/protocol.md (Job key
 * handshake) gives the bound.
 */
#define NH_PASSES    2
#define NH_CHUNK     1024
#define NH_OUT       (8 * NH_PASSES)
#define NH_KEY_WORDS (NH_CHUNK / 4 + 4 * (NH_PASSES - 1))
#define NH_KEY_NONCE_BYTE 0xff

struct gmac {
	uint8_t rk[15][16];          /* the AES-256 round keys */
	uint8_t h[GMAC_POWERS][16];  /* H^1..H^16, byte-reversed */
	int nh;                      /* 1: NH-GMAC, else GMAC */
	/* NH's key, each group of four words stored as k0 k2 k1 k3 (the
	 * order the vector code pairs them in) */
	uint32_t nhk[NH_KEY_WORDS];
};

/* 1 when this CPU runs the fast body (ESD_NO_VPCLMUL=1 in the environment
 * says no, so the tests can run the other path on any CPU). */
int esd_gmac_available(void);
/* Expand key into g: 0, or -ENOTSUP without the CPU's units. */
int esd_gmac_init(struct gmac *g, const uint8_t key[32]);
/* The same for NH-GMAC: its tags come from the same calls below. */
int esd_gmac_init_nh(struct gmac *g, const uint8_t key[32]);
/* NH of one chunk of len bytes (a multiple of 16, at most NH_CHUNK) under
 * the key words in their plain order, the portable way: the reference the
 * tests hold the vector code to. out: NH_PASSES sums, little-endian. */
void esd_nh_ref(const uint32_t key[NH_KEY_WORDS], const uint8_t *p, size_t len,
                uint8_t out[NH_OUT]);
/*
 * The tag of head[0..head_len) followed by body[0..body_len) (head_len a
 * multiple of 16), under the 12-byte nonce. With copy, body's bytes are
 * also written to copy as they are read (one pass over them).
 */
void esd_gmac_tag(const struct gmac *g, const uint8_t nonce[12], const uint8_t *head,
                  size_t head_len, const uint8_t *body, size_t body_len, uint8_t *copy,
                  uint8_t tag[16]);

/*
 * The same tag taken in pieces: esd_gmac_run_start(), esd_gmac_run_add() for each
 * piece in order (with copy, its bytes are also written there), then
 * esd_gmac_run_end() with the nonce gives esd_gmac_tag()'s tag of all the pieces.
 * The nonce comes last: the hash of the bytes does not depend on it.
 */
struct gmac_run {
	uint8_t y[16];    /* the hash so far, byte-reversed */
	uint8_t part[16]; /* the bytes of a block not yet whole */
	size_t part_len;
	size_t total;     /* bytes added */
	uint64_t sums[NH_PASSES]; /* NH-GMAC: the open chunk's sums */
	size_t units;             /* NH-GMAC: its 16-byte units in sums */
};
void esd_gmac_run_start(struct gmac_run *r);
void esd_gmac_run_add(const struct gmac *g, struct gmac_run *r, const uint8_t *p, size_t len,
                      uint8_t *copy);
void esd_gmac_run_end(const struct gmac *g, const struct gmac_run *r, const uint8_t nonce[12],
                      uint8_t tag[16]);
/* The tag in two steps: esd_gmac_run_end() with nonce NULL gives the
 * hash alone (no nonce in it, kept secret: it is no tag), and
 * esd_gmac_mask() turns it into the tag under nonce, in place. */
void esd_gmac_mask(const struct gmac *g, const uint8_t nonce[12], uint8_t tag[16]);

#endif
