/*
 * The job key (esd/auth.h) and what a link does with it: the mutual
 * challenge-response that opens a keyed link, and the tag every frame
 * carries after it. Every primitive is libsodium's:
 *
 *   nonces        randombytes_buf, 32 bytes per side per link
 *   proofs, keys  keyed BLAKE2b (crypto_generichash) of a label and both
 *                 nonces: the server's proof, the client's proof, and one
 *                 key per direction of this link
 *   frame tags    an AEAD with an empty message and the whole frame as
 *                 associated data, under the direction's key, with the count
 *                 of frames sent so far as the nonce: a tag binds a frame to
 *                 this link and to its place in it. NH-GMAC (gmac.h: NH
 *                 in front of GHASH, AES-256 for the keys and the mask)
 *                 when both ends' CPUs have AVX2 and VPCLMULQDQ, else
 *                 AES-256-GCM when both run it in hardware, else
 *                 ChaCha20-Poly1305 (IETF); the client offers, the server
 *                 chooses, and both proofs cover the offer and the
 *                 choice. Where the CPU has
 *                 VPCLMULQDQ, the same AES-256-GCM tags come from gmac.c
 *                 (two blocks per multiply; a sealed frame's copy made in
 *                 the same pass), not libsodium's; a frame the wire hashed
 *                 as it took it in (dpdk, tcp) is checked by finishing that
 *                 hash with the frame's nonce
 *
 * docs/protocol.md ("Job key handshake") is the protocol; this file
 * follows it step by step.
 */
#include "link_internal.h"

#include <esd/auth.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEX_LEN (2 * ESD_KEY_BYTES)

/* ---- the key file -------------------------------------------------------- */

static int sodium_ready(void)
{
	if (sodium_init() < 0) {
		ESD_ERR("auth", "libsodium failed to start");
		return -EIO;
	}
	return 0;
}

int esd_key_create(const char *path)
{
	struct esd_key k;
	char hex[HEX_LEN + 2];
	int rc = sodium_ready();
	if (rc)
		return rc;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = esd_neg_errno();
		ESD_ERR("auth", "%s: %s", path, strerror(-rc));
		return rc;
	}
	randombytes_buf(k.b, sizeof(k.b));
	sodium_bin2hex(hex, sizeof(hex), k.b, sizeof(k.b));
	hex[HEX_LEN] = '\n';
	ssize_t n = write(fd, hex, HEX_LEN + 1);
	rc = n == HEX_LEN + 1 ? 0 : n < 0 ? esd_neg_errno() : -EIO;
	if (!rc && fsync(fd))
		rc = esd_neg_errno();
	close(fd);
	sodium_memzero(hex, sizeof(hex));
	esd_key_wipe(&k);
	if (rc) {
		ESD_ERR("auth", "%s: writing the key: %s", path, strerror(-rc));
		unlink(path);
	}
	return rc;
}

/* What a file of mode m is, for a refusal. */
static const char *file_kind(mode_t m)
{
	return S_ISFIFO(m)  ? "a FIFO"
	       : S_ISDIR(m) ? "a directory"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m) ? "a character device"
	       : S_ISBLK(m) ? "a block device"
			    : "not a regular file";
}

/* The key file must be a regular file of this process's user (or root's)
 * that no one else may read or write. */
static int key_file_mode_ok(const char *path, int fd)
{
	struct stat st;
	if (fstat(fd, &st)) {
		int rc = esd_neg_errno();
		ESD_ERR("auth", "%s: %s", path, strerror(-rc));
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		ESD_ERR("auth", "%s: the job key must be a regular file; this is %s", path,
			file_kind(st.st_mode));
		return -EINVAL;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		ESD_ERR("auth", "%s: the job key is owned by uid %u, not by this process's uid %u "
			"or root: chown it, or give this process a key of its own", path,
			(unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (st.st_mode & 077) {
		ESD_ERR("auth", "%s: the job key is open to others (mode %03o): chmod 600 %s", path,
			(unsigned)(st.st_mode & 0777), path);
		return -EPERM;
	}
	return 0;
}

int esd_key_load(const char *path, struct esd_key *out)
{
	char text[HEX_LEN + 3];
	int rc = sodium_ready();
	if (rc)
		return rc;
	/* O_NONBLOCK: a FIFO opens at once (and is refused below) rather
	 * than waiting for a writer */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		rc = esd_neg_errno();
		struct stat st;
		if (rc == -ENXIO && !stat(path, &st)) /* a socket, or a device without its driver */
			ESD_ERR("auth", "job key %s: the job key must be a regular file; this is %s",
				path, file_kind(st.st_mode));
		else
			ESD_ERR("auth", "job key %s: %s", path, strerror(-rc));
		return rc;
	}
	if ((rc = key_file_mode_ok(path, fd))) {
		close(fd);
		return rc;
	}
	ssize_t n = read(fd, text, sizeof(text));
	rc = n < 0 ? esd_neg_errno() : 0;
	close(fd);
	if (rc) {
		ESD_ERR("auth", "job key %s: %s", path, strerror(-rc));
		return rc;
	}
	size_t len = (size_t)n, used = 0;
	while (len && (text[len - 1] == '\n' || text[len - 1] == '\r'))
		len--;
	if (len != HEX_LEN ||
	    sodium_hex2bin(out->b, sizeof(out->b), text, len, NULL, &used, NULL) ||
	    used != ESD_KEY_BYTES)
		rc = -EINVAL;
	sodium_memzero(text, sizeof(text));
	if (rc)
		ESD_ERR("auth", "job key %s: expected one line of %d hexadecimal digits "
			"(esdctl keygen writes one)", path, HEX_LEN);
	return rc;
}

void esd_key_wipe(struct esd_key *k)
{
	sodium_memzero(k, sizeof(*k));
}

/* ---- proofs and link keys ------------------------------------------------ */

/* out = BLAKE2b-256 keyed by the job key, of label || nc || ns || offer ||
 * suite (the last two as u32 little-endian). */
static void derive(const struct link_auth *a, const char *label, uint8_t out[32])
{
	crypto_generichash_state st;
	uint8_t os[8];
	for (int i = 0; i < 4; i++) {
		os[i] = (uint8_t)(a->offer >> (8 * i));
		os[4 + i] = (uint8_t)(a->suite >> (8 * i));
	}
	crypto_generichash_init(&st, a->key, sizeof(a->key), 32);
	crypto_generichash_update(&st, (const uint8_t *)label, strlen(label) + 1);
	crypto_generichash_update(&st, a->nc, sizeof(a->nc));
	crypto_generichash_update(&st, a->ns, sizeof(a->ns));
	crypto_generichash_update(&st, os, sizeof(os));
	crypto_generichash_final(&st, out, 32);
}

/* The tag ciphers this process can run. ESD_AUTH_SUITES in the
 * environment takes the best away, e.g. to compare them: aes256-gcm leaves
 * AES-256-GCM and ChaCha20-Poly1305, chacha20-poly1305 the latter alone. */
static uint32_t local_suites(void)
{
	const char *only = getenv("ESD_AUTH_SUITES");
	int chacha = only && !strcmp(only, "chacha20-poly1305");
	int gcm = only && !strcmp(only, "aes256-gcm");
	uint32_t s = ESD_SUITE_CHACHA20_POLY1305;
	if (crypto_aead_aes256gcm_is_available() && !chacha)
		s |= ESD_SUITE_AES256_GCM;
	if ((s & ESD_SUITE_AES256_GCM) && esd_gmac_available() && !gcm)
		s |= ESD_SUITE_NH_GMAC;
	return s;
}

static void derive_link_keys(struct esd_link *l, int client)
{
	struct link_auth *a = l->auth;
	derive(a, client ? "esd link v1 client to server" : "esd link v1 server to client",
	       a->ktx);
	derive(a, client ? "esd link v1 server to client" : "esd link v1 client to server",
	       a->krx);
	a->tx_ctr = a->rx_ctr = 0;
	if (a->suite == ESD_SUITE_NH_GMAC) /* offered only where it runs */
		a->wide = !esd_gmac_init_nh(&a->gtx, a->ktx) && !esd_gmac_init_nh(&a->grx, a->krx);
	else
		a->wide = a->suite == ESD_SUITE_AES256_GCM && !esd_gmac_init(&a->gtx, a->ktx) &&
			  !esd_gmac_init(&a->grx, a->krx);
	/* the wire hashes the frames it reassembles as it copies them in
	 * (frames it hands over whole, e.g. without the reliable layer's
	 * copies in between; see rx_hash_of) */
	if (a->wide && !l->w->lossy)
		l->w->rx_mac = &a->grx;
	a->state = AUTH_OPEN;
}

static int send_auth(struct esd_link *l, uint32_t step, uint32_t suites, const uint8_t *x,
		     const uint8_t *y, int64_t deadline)
{
	esd_buf_reset(&l->scratch);
	int rc = esd_enc_link_auth(&l->scratch, step, suites, x, y);
	if (rc)
		return rc;
	struct iovec iov = {.iov_base = l->scratch.data, .iov_len = l->scratch.len};
	return esd_link_send_raw(l, &iov, 1, deadline);
}

/* The refusal a peer gets: no reason beyond this (it could help a guesser),
 * and nothing after it (the link sends no more: the caller's own ERROR
 * with the reason stays here). */
static int refuse(struct esd_link *l, const char *why)
{
	snprintf(l->err, sizeof(l->err), "%s", why);
	esd_buf_reset(&l->scratch);
	if (!esd_enc_error(&l->scratch, -EACCES, "authentication failed")) {
		struct iovec iov = {.iov_base = l->scratch.data, .iov_len = l->scratch.len};
		esd_link_send_raw(l, &iov, 1, esd_deadline_after(l->w->timeout_ns));
	}
	l->broken = 2;
	return -EACCES;
}

int esd_auth_create(struct esd_link *l, const struct esd_key *key, int client)
{
	int rc = sodium_ready(); /* also picks the CPU's fastest code */
	if (rc)
		return rc;
	if (!(l->auth = calloc(1, sizeof(*l->auth))))
		return -ENOMEM;
	memcpy(l->auth->key, key->b, sizeof(l->auth->key));
	esd_buf_init(&l->auth->sealed);
	l->auth->state = client ? AUTH_CLIENT_WAIT : AUTH_SERVER_WAIT;
	l->w->lim.max_body += AUTH_TAG_BYTES; /* a frame may be a tag longer */
	return 0;
}

int esd_auth_client(struct esd_link *l, int64_t deadline)
{
	struct link_auth *a = l->auth;
	randombytes_buf(a->nc, sizeof(a->nc));
	a->state = AUTH_CLIENT_WAIT;
	a->offer = local_suites();
	int rc = send_auth(l, 1, a->offer, a->nc, NULL, deadline);
	while (!rc && a->state != AUTH_OPEN) {
		const uint8_t *frame;
		size_t len;
		if ((rc = esd_link_next_frame(l, &frame, &len, deadline)))
			break;
		struct esd_msg m;
		if ((rc = esd_proto_decode(frame, len, &l->w->lim, &m, l->err, sizeof(l->err))))
			break;
		if (m.hdr.op == ESD_OP_ERROR) {
			snprintf(l->err, sizeof(l->err), "the peer refused this link: %.*s",
				 (int)m.u.error.len, m.u.error.text);
			/* a busy peer (no room for another link yet) is not a refusal */
			rc = m.u.error.code == -EAGAIN ? -EAGAIN : -EACCES;
		} else if (m.hdr.op != ESD_OP_LINK_AUTH || m.u.link_auth.step != 2) {
			snprintf(l->err, sizeof(l->err),
				 "the peer did not answer the job key handshake (it sent %s): does it "
				 "run without a key?", esd_op_name(m.hdr.op));
			rc = -EACCES;
		} else {
			uint8_t want[32], proof[32];
			memcpy(a->ns, m.u.link_auth.a, sizeof(a->ns));
			a->suite = m.u.link_auth.suites;
			derive(a, "esd link v1 server proof", want);
			if (crypto_verify_32(want, m.u.link_auth.b) ||
			    (a->suite & (a->suite - 1)) || !(a->suite & a->offer)) {
				snprintf(l->err, sizeof(l->err),
					 "the peer does not hold this job's key");
				rc = -EACCES;
				break;
			}
			derive(a, "esd link v1 client proof", proof);
			rc = send_auth(l, 3, a->suite, NULL, proof, deadline);
			derive_link_keys(l, 1);
		}
	}
	if (rc && rc != -EACCES && !l->err[0])
		snprintf(l->err, sizeof(l->err), "job key handshake: %s", l->w->err);
	if (rc)
		ESD_ERR("auth", "link to %s: %s", l->w->peer, l->err);
	return rc;
}

/* A LINK_AUTH frame at the server (steps 1 and 3). */
static int server_step(struct esd_link *l, const struct esd_link_auth *m)
{
	struct link_auth *a = l->auth;
	if (a->state == AUTH_SERVER_WAIT && m->step == 1) {
		uint8_t proof[32];
		uint32_t both = m->suites & local_suites();
		memcpy(a->nc, m->a, sizeof(a->nc));
		a->offer = m->suites;
		a->suite = both & ESD_SUITE_NH_GMAC ? ESD_SUITE_NH_GMAC
			   : both & ESD_SUITE_AES256_GCM ? ESD_SUITE_AES256_GCM
			   : both & ESD_SUITE_CHACHA20_POLY1305 ? ESD_SUITE_CHACHA20_POLY1305 : 0;
		if (!a->suite)
			return refuse(l, "job key handshake: no tag cipher in common with the peer");
		randombytes_buf(a->ns, sizeof(a->ns));
		derive(a, "esd link v1 server proof", proof);
		a->state = AUTH_SERVER_PROOF;
		return send_auth(l, 2, a->suite, a->ns, proof, esd_deadline_after(l->w->timeout_ns));
	}
	if (a->state == AUTH_SERVER_PROOF && m->step == 3) {
		uint8_t want[32];
		derive(a, "esd link v1 client proof", want);
		if (crypto_verify_32(want, m->b))
			return refuse(l, "job key handshake: the peer does not hold this job's key");
		derive_link_keys(l, 0);
		ESD_DBG("auth", "link from %s holds the job key", l->w->peer);
		return 0;
	}
	return refuse(l, "job key handshake: a step out of order");
}

/* The tag of frame[0..len) under the sending direction's key: an AEAD of
 * the empty message with the frame as associated data. */
static void tag_make(const struct link_auth *a, const uint8_t *frame, size_t len,
		     uint8_t tag[AUTH_TAG_BYTES], const uint8_t nonce[12])
{
	uint8_t none[1] = {0}; /* the empty message (the API wants a pointer) */
	if (a->wide)
		esd_gmac_tag(&a->gtx, nonce, NULL, 0, frame, len, NULL, tag);
	else if (a->suite == ESD_SUITE_AES256_GCM)
		crypto_aead_aes256gcm_encrypt_detached(none, tag, NULL, none, 0, frame, len, NULL,
						       nonce, a->ktx);
	else
		crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, tag, NULL, none, 0, frame,
								   len, NULL, nonce, a->ktx);
}

/* The hash the wire took of frame[0..len) (and its tag) as it copied it
 * in, or NULL: the frame must be the one the wire handed up last, unchanged
 * by a layer between (none runs: no reliable layer, no faults). */
static const struct gmac_run *rx_hash_of(const struct esd_link *l, const uint8_t *frame,
					 size_t len)
{
	const struct wire *w = l->w;
	if (!w->rx_run || w->rx_run_frame != frame || l->rel || l->fault.on ||
	    w->rx_run->total != len)
		return NULL;
	return w->rx_run;
}

/* 0 when tag is frame[0..len)'s under the receiving direction's key (run:
 * the wire's hash of the same bytes, or NULL). */
static int tag_check(const struct link_auth *a, const uint8_t *frame, size_t len,
		     const uint8_t tag[AUTH_TAG_BYTES], const uint8_t nonce[12],
		     const struct gmac_run *run)
{
	uint8_t none[1] = {0};
	if (a->wide) {
		uint8_t want[AUTH_TAG_BYTES];
		if (run)
			esd_gmac_run_end(&a->grx, run, nonce, want);
		else
			esd_gmac_tag(&a->grx, nonce, NULL, 0, frame, len, NULL, want);
		return crypto_verify_16(want, tag);
	}
	if (a->suite == ESD_SUITE_NH_GMAC) /* no NH-GMAC code here: nothing passes */
		return -1;
	if (a->suite == ESD_SUITE_AES256_GCM)
		return crypto_aead_aes256gcm_decrypt_detached(none, NULL, none, 0, tag, frame, len,
							      nonce, a->krx);
	return crypto_aead_chacha20poly1305_ietf_decrypt_detached(none, NULL, none, 0, tag, frame,
								  len, nonce, a->krx);
}

/* The 12-byte nonce of frame number ctr. */
static void ctr_nonce(uint64_t ctr, uint8_t nonce[12])
{
	memset(nonce, 0, 12);
	for (int i = 0; i < 8; i++)
		nonce[i] = (uint8_t)(ctr >> (8 * i));
}

/* The header fields the layers below may change (the reliable layer's
 * sequence number and flags) are zero while a tag is made or checked. */
static void hdr_canonical(uint8_t *frame, uint16_t *flags, uint64_t *seq)
{
	uint16_t f;
	memcpy(&f, frame + 6, 2);
	memcpy(seq, frame + 16, 8);
	*flags = f;
	f &= (uint16_t) ~(ESD_FLAG_RELIABLE | ESD_FLAG_RETRANSMIT);
	memcpy(frame + 6, &f, 2);
	memset(frame + 16, 0, 8);
}

/* Mark a frame's header as carrying a tag: the tagged flag set, the body
 * length grown by the tag, the sequence number zeroed (hdr_canonical). */
static void hdr_mark_tagged(uint8_t *frame)
{
	uint16_t flags;
	uint64_t seq;
	hdr_canonical(frame, &flags, &seq);
	flags |= ESD_FLAG_TAGGED;
	memcpy(frame + 6, &flags, 2);
	uint32_t blen;
	memcpy(&blen, frame + 8, 4);
	blen += AUTH_TAG_BYTES;
	memcpy(frame + 8, &blen, 4);
}

/* The nonce of a heartbeat sent beside the frames: its own counter, in a
 * space of its own (the top bit of the last byte). */
static void beat_nonce(uint64_t beat, uint8_t nonce[12])
{
	ctr_nonce(beat, nonce);
	nonce[11] = 0x80;
}

/* A tagged heartbeat sent beside the frames (ESD_BEAT_ASIDE): its beat
 * number, else 0. The number is read before the tag is checked; the tag
 * covers it. */
static uint64_t aside_beat(const uint8_t *frame, size_t len)
{
	uint32_t bflags;
	uint64_t beat;
	if (frame[5] != ESD_OP_LINK_HEARTBEAT ||
	    len != ESD_FRAME_HDR_SIZE + ESD_LINK_HEARTBEAT_BODY + AUTH_TAG_BYTES)
		return 0;
	memcpy(&bflags, frame + ESD_FRAME_HDR_SIZE + 8, 4);
	memcpy(&beat, frame + ESD_FRAME_HDR_SIZE, 8);
	return bflags & ESD_BEAT_ASIDE ? beat : 0;
}

static int check_tag(struct esd_link *l, uint8_t *frame, size_t *len)
{
	struct link_auth *a = l->auth;
	uint16_t flags;
	uint64_t seq;
	uint8_t nonce[12];
	if (*len < ESD_FRAME_HDR_SIZE + AUTH_TAG_BYTES) {
		snprintf(l->err, sizeof(l->err), "a tagged frame of %zu bytes has no room for a tag",
			 *len);
		return -EACCES;
	}
	size_t body = *len - AUTH_TAG_BYTES;
	const struct gmac_run *run = rx_hash_of(l, frame, body);
	uint64_t beat = aside_beat(frame, *len);
	hdr_canonical(frame, &flags, &seq);
	if (beat)
		beat_nonce(beat, nonce);
	else
		ctr_nonce(a->rx_ctr, nonce);
	if ((beat && beat <= a->rx_beat) || tag_check(a, frame, body, frame + body, nonce, run)) {
		if (beat)
			snprintf(l->err, sizeof(l->err),
				 "heartbeat %llu of the link failed authentication (forged, altered "
				 "or replayed)", (unsigned long long)beat);
		else
			snprintf(l->err, sizeof(l->err),
				 "frame %llu of the link failed authentication (forged, altered, "
				 "replayed, out of order, or one before it held back)",
				 (unsigned long long)a->rx_ctr);
		return -EACCES;
	}
	if (beat)
		a->rx_beat = beat;
	else
		a->rx_ctr++;
	/* the frame as its sender's application made it */
	uint32_t blen;
	memcpy(&blen, frame + 8, 4);
	blen -= AUTH_TAG_BYTES;
	memcpy(frame + 8, &blen, 4);
	flags &= (uint16_t)~ESD_FLAG_TAGGED;
	memcpy(frame + 6, &flags, 2);
	memcpy(frame + 16, &seq, 8);
	*len = body;
	return 0;
}

int esd_auth_rx(struct esd_link *l, uint8_t *frame, size_t *len)
{
	struct link_auth *a = l->auth;
	uint16_t flags;
	memcpy(&flags, frame + 6, 2);
	uint8_t op = frame[5];
	if (a->state == AUTH_OPEN) {
		if (flags & ESD_FLAG_TAGGED)
			return check_tag(l, frame, len);
		if (op == ESD_OP_ERROR) /* the peer's refusal of our proof */
			return 0;
		snprintf(l->err, sizeof(l->err), "an untagged %s frame on a keyed link",
			 esd_op_name(op));
		return -EACCES;
	}
	/* Nothing of an unproven peer reaches the application, its words
	 * included: an ERROR now (no member sends one before the handshake)
	 * ends the link, its text unread. */
	if (op == ESD_OP_ERROR) {
		snprintf(l->err, sizeof(l->err), "the peer sent an ERROR before the job key "
			 "handshake (it has no key, or is no member of the job)");
		l->broken = 2;
		return -EACCES;
	}
	if (op != ESD_OP_LINK_AUTH || a->state == AUTH_CLIENT_WAIT)
		return refuse(l, "the peer did not start with the job key handshake (does it run "
				 "without job.key?)");
	struct esd_msg m;
	int rc = esd_proto_decode(frame, *len, &l->w->lim, &m, l->err, sizeof(l->err));
	if (rc)
		return refuse(l, "job key handshake: a malformed frame");
	if ((rc = server_step(l, &m.u.link_auth)))
		return rc;
	return 1;
}

/* The head of a sealed frame: its header and what follows it up to a
 * whole number of GHASH blocks, copied before the header is changed. */
#define SEAL_HEAD 32

/* Seal iov[i] into the buffer at off; returns the sealed length. The wide
 * path copies the frame's bytes after its head while it tags them. */
static size_t seal_one(struct link_auth *a, const struct iovec *v, size_t off)
{
	uint8_t *f = a->sealed.data + off, nonce[12];
	const uint8_t *src = v->iov_base;
	bool fused = a->wide && v->iov_len >= SEAL_HEAD;
	memcpy(f, src, fused ? SEAL_HEAD : v->iov_len);
	hdr_mark_tagged(f);
	ctr_nonce(a->tx_ctr++, nonce);
	if (fused)
		esd_gmac_tag(&a->gtx, nonce, f, SEAL_HEAD, src + SEAL_HEAD, v->iov_len - SEAL_HEAD,
		             f + SEAL_HEAD, f + v->iov_len);
	else
		tag_make(a, f, v->iov_len, f + v->iov_len, nonce);
	return v->iov_len + AUTH_TAG_BYTES;
}

int esd_auth_seal(struct esd_link *l, struct iovec *iov, int n)
{
	struct link_auth *a = l->auth;
	if (a->state != AUTH_OPEN) {
		for (int i = 0; i < n; i++)
			if (((const uint8_t *)iov[i].iov_base)[5] != ESD_OP_ERROR) {
				snprintf(l->err, sizeof(l->err),
					 "send: the link's job key handshake is not done");
				return -EACCES;
			}
		return 0;
	}
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len + AUTH_TAG_BYTES;
	esd_buf_reset(&a->sealed);
	if (esd_buf_reserve(&a->sealed, total))
		return -ENOMEM;
	size_t off = 0;
	for (int i = 0; i < n; i++) {
		size_t sl = seal_one(a, &iov[i], off);
		iov[i].iov_base = a->sealed.data + off;
		iov[i].iov_len = sl;
		off += sl;
	}
	a->sealed.len = off;
	return 0;
}

int esd_auth_seal_beat(struct esd_link *l, uint8_t *frame, size_t *len, size_t cap, int aside,
                       uint64_t beat)
{
	struct link_auth *a = l->auth;
	uint8_t nonce[12];
	if (a->state != AUTH_OPEN)
		return -EACCES;
	if (*len + AUTH_TAG_BYTES > cap)
		return -ENOSPC;
	hdr_mark_tagged(frame);
	if (aside)
		beat_nonce(beat, nonce);
	else
		ctr_nonce(a->tx_ctr++, nonce);
	tag_make(a, frame, *len, frame + *len, nonce);
	*len += AUTH_TAG_BYTES;
	return 0;
}

void esd_auth_unseal_beat(struct esd_link *l)
{
	l->auth->tx_ctr--;
}

int esd_auth_in_place_ok(const struct esd_link *l)
{
	return l->auth && l->auth->state == AUTH_OPEN && l->auth->wide;
}

int esd_auth_mark_in_place(struct esd_link *l, uint8_t *f, size_t len)
{
	if (!esd_auth_in_place_ok(l) || len < SEAL_HEAD + AUTH_TAG_BYTES)
		return -EINVAL;
	hdr_mark_tagged(f);
	struct gmac_run r;
	esd_gmac_run_start(&r);
	esd_gmac_run_add(&l->auth->gtx, &r, f, len - AUTH_TAG_BYTES, NULL);
	esd_gmac_run_end(&l->auth->gtx, &r, NULL, f + len - AUTH_TAG_BYTES);
	return 0;
}

void esd_auth_finish_in_place(struct esd_link *l, uint8_t *f, size_t len)
{
	uint8_t nonce[12];
	ctr_nonce(l->auth->tx_ctr++, nonce);
	esd_gmac_mask(&l->auth->gtx, nonce, f + len - AUTH_TAG_BYTES);
}

/* The copy is hashed a window at a time, while the window is still in the
 * CPU's cache: the tag's hash then runs over whole contiguous spans (its
 * fast path), not over the pieces as they come. */
#define MARK_WINDOW (16u << 10)

int esd_auth_mark_begin(const struct esd_link *l, struct auth_mark *m, uint8_t *f, size_t len)
{
	if (!esd_auth_in_place_ok(l) || len < SEAL_HEAD)
		return -EINVAL;
	esd_gmac_run_start(&m->run);
	m->f = f;
	m->len = len;
	m->at = 0;
	m->hashed = 0;
	return 0;
}

/* The bytes copied and not hashed yet, hashed (the header marked first:
 * it changes before it is hashed). */
static void mark_hash(struct esd_link *l, struct auth_mark *m)
{
	if (!m->hashed)
		hdr_mark_tagged(m->f);
	esd_gmac_run_add(&l->auth->gtx, &m->run, m->f + m->hashed, m->at - m->hashed, NULL);
	m->hashed = m->at;
}

void esd_auth_mark_add(struct esd_link *l, struct auth_mark *m, const uint8_t *p, size_t n)
{
	if (m->at + n > m->len) { /* more than the frame: esd_auth_mark_end says so */
		m->at = m->len + 1;
		return;
	}
	memcpy(m->f + m->at, p, n);
	m->at += n;
	if (m->at - m->hashed >= MARK_WINDOW)
		mark_hash(l, m);
}

int esd_auth_mark_end(struct esd_link *l, struct auth_mark *m)
{
	if (m->at != m->len)
		return -EINVAL;
	if (m->at > m->hashed)
		mark_hash(l, m);
	esd_gmac_run_end(&l->auth->gtx, &m->run, NULL, m->f + m->len);
	return 0;
}

void esd_auth_fini(struct link_auth *a)
{
	if (!a)
		return;
	esd_buf_free(&a->sealed);
	sodium_memzero(a, sizeof(*a));
	free(a);
}

