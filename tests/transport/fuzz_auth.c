/*
 * libFuzzer target for the job key handshake and the frame tags
 * (transport/auth.c), with the link below it replaced by the input: what
 * "the peer sent" is cut from the fuzzer's bytes, what this side sends is
 * dropped. The first byte picks the side:
 *
 *   0  a server waiting for the handshake: every frame goes to esd_auth_rx()
 *      until the link fails; nothing may pass (an ERROR neither);
 *   1  a client in its handshake: esd_auth_client() reads the frames; without
 *      the key it must never finish;
 *   2  an open link whose keys are known here (its tag cipher from the
 *      same byte): each piece is either sealed
 *      by a sender holding the same key (and maybe altered after) or
 *      passed raw; a frame passes iff it was sealed here and not altered
 *      (a forgery found by the fuzzer aborts), and what passes decodes.
 *
 * Pieces: u16 length (little-endian), one control byte, then the bytes.
 * Built with -DESD_FUZZ=ON and clang; the corpus (corpus_auth/) replays as
 * test_fuzz_auth_corpus in every build.
 */
#include "link_internal.h"

#include <esd/proto.h>

#include <sodium.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_PIECE 4096

static const uint8_t *in;
static size_t in_left;
static _Alignas(16) uint8_t frame_buf[MAX_PIECE + 64];

/* The next piece of the input: its control byte and bytes (0), or -1. */
static int next_piece(uint8_t *ctl, const uint8_t **p, size_t *len)
{
	if (in_left < 3)
		return -1;
	size_t n = (size_t)in[0] | (size_t)in[1] << 8;
	*ctl = in[2];
	in += 3;
	in_left -= 3;
	if (n > in_left)
		n = in_left;
	if (n > MAX_PIECE)
		n = MAX_PIECE;
	*p = in;
	*len = n;
	in += n;
	in_left -= n;
	return 0;
}

/* The link below auth.c, for this target. */
int esd_link_next_frame(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline)
{
	(void)l;
	(void)deadline;
	uint8_t ctl;
	const uint8_t *p;
	if (next_piece(&ctl, &p, len))
		return -ECONNRESET;
	memcpy(frame_buf, p, *len);
	*frame = frame_buf;
	/* as a backend returns it: a whole frame whose header was checked */
	struct esd_frame_hdr h;
	if (esd_frame_hdr_parse(frame_buf, *len, &l->w->lim, &h, NULL, 0) ||
	    *len != ESD_FRAME_HDR_SIZE + h.length)
		return -EPROTO;
	return 0;
}

int esd_link_send_raw(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline)
{
	(void)l;
	(void)iov;
	(void)n;
	(void)deadline;
	return 0;
}

int64_t esd_deadline_after(int64_t timeout_ns)
{
	return timeout_ns;
}

static struct wire wire = {.lim = {.max_body = MAX_PIECE + 16, .max_rows = 64, .max_dim = 64},
			   .timeout_ns = 1};

static void link_init(struct esd_link *l, struct link_auth *a, enum auth_state st)
{
	memset(l, 0, sizeof(*l));
	memset(a, 0, sizeof(*a));
	l->w = &wire;
	l->lim = wire.lim;
	l->lim.max_body = MAX_PIECE;
	l->auth = a;
	esd_buf_init(&l->scratch);
	esd_buf_init(&a->sealed);
	memset(a->key, 0x42, sizeof(a->key));
	memset(a->ktx, 0x17, sizeof(a->ktx));
	memset(a->krx, 0x17, sizeof(a->krx));
	a->state = st;
}

static void link_fini(struct esd_link *l)
{
	esd_buf_free(&l->scratch);
	esd_buf_free(&l->auth->sealed);
}

static void server_side(void)
{
	struct esd_link l;
	struct link_auth a;
	link_init(&l, &a, AUTH_SERVER_WAIT);
	const uint8_t *f;
	size_t len;
	while (!esd_link_next_frame(&l, &f, &len, 0)) {
		int rc = esd_auth_rx(&l, (uint8_t *)f, &len);
		if (rc < 0)
			break;
		if (rc == 0 && a.state != AUTH_OPEN)
			abort(); /* something reached the application unproven */
		if (a.state == AUTH_OPEN)
			abort(); /* the client's proof was guessed */
	}
	link_fini(&l);
}

static void client_side(void)
{
	struct esd_link l;
	struct link_auth a;
	link_init(&l, &a, AUTH_CLIENT_WAIT);
	if (!esd_auth_client(&l, 0))
		abort(); /* the server's proof was guessed */
	link_fini(&l);
}

/* A frame of op with body bytes p[0..n) (n rounded down to 4), sealed. */
static size_t seal(struct esd_link *tx, uint8_t op, const uint8_t *p, size_t n, uint8_t *out)
{
	n &= ~(size_t)3;
	uint8_t f[ESD_FRAME_HDR_SIZE + MAX_PIECE];
	uint32_t magic = ESD_PROTO_MAGIC, blen = (uint32_t)n;
	memset(f, 0, ESD_FRAME_HDR_SIZE);
	memcpy(f, &magic, 4);
	f[4] = ESD_PROTO_VERSION;
	f[5] = op;
	memcpy(f + 8, &blen, 4);
	memcpy(f + ESD_FRAME_HDR_SIZE, p, n);
	struct iovec iov = {.iov_base = f, .iov_len = ESD_FRAME_HDR_SIZE + n};
	if (esd_auth_seal(tx, &iov, 1))
		abort();
	memcpy(out, iov.iov_base, iov.iov_len);
	return iov.iov_len;
}

static void open_link(uint32_t suite)
{
	struct esd_link tx, rx;
	struct link_auth ta, ra;
	link_init(&tx, &ta, AUTH_OPEN);
	link_init(&rx, &ra, AUTH_OPEN);
	ta.suite = ra.suite = suite;
	if (suite == ESD_SUITE_NH_GMAC) { /* gmac.c's tags, as a link on such a CPU */
		if (esd_gmac_init_nh(&ta.gtx, ta.ktx) || esd_gmac_init_nh(&ra.grx, ra.krx))
			return;
		ta.wide = ra.wide = 1;
	}
	uint8_t ctl;
	const uint8_t *p;
	size_t n;
	while (!next_piece(&ctl, &p, &n)) {
		size_t len;
		bool honest = ctl & 1;
		if (honest) {
			len = seal(&tx, (uint8_t)(ctl >> 4), p, n, frame_buf);
			if (ctl & 2) { /* altered on the path */
				size_t at = (size_t)ctl * 131 % len;
				unsigned bit = ctl % 7;
				frame_buf[at] ^= (uint8_t)(1u << bit);
				/* only what the reliable layer may change is not covered:
				 * seq, and the RELIABLE and RETRANSMIT flags */
				honest = (at >= 16 && at < 24) || (at == 6 && bit < 2);
			}
		} else {
			len = n;
			memcpy(frame_buf, p, n);
		}
		if (len < ESD_FRAME_HDR_SIZE)
			break;
		uint16_t flags;
		memcpy(&flags, frame_buf + 6, 2);
		uint8_t op = frame_buf[5];
		int rc = esd_auth_rx(&rx, frame_buf, &len);
		if (rc == 0 && !honest && !(op == ESD_OP_ERROR && !(flags & ESD_FLAG_TAGGED)))
			abort(); /* a forged or altered frame passed its tag */
		if (rc)
			break;
		struct esd_msg m;
		char err[160];
		(void)esd_proto_decode(frame_buf, len, &rx.lim, &m, err, sizeof(err));
	}
	link_fini(&tx);
	link_fini(&rx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (sodium_init() < 0) /* as a link does: the CPU's fastest code */
		abort();
	in = data + 1;
	in_left = size - 1;
	switch (data[0] % 3) {
	case 0:
		server_side();
		break;
	case 1:
		client_side();
		break;
	default: /* the tag cipher from the same byte */
		open_link(data[0] / 3 % 3 == 2 ? ESD_SUITE_NH_GMAC
			  : data[0] / 3 % 3 ? ESD_SUITE_AES256_GCM : ESD_SUITE_CHACHA20_POLY1305);
	}
	return 0;
}
