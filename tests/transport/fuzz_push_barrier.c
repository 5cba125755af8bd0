/*
 * libFuzzer target for the push sequence rule and BARRIER's push count:
 * the input is a script of frames that up to NLINKS node daemons send one
 * PS shard (HELLO, PUSH_VALUE, PUSH_GRAD, BARRIER, ROLLBACK, link closes),
 * each built with the real encoder, optionally with lying fields or a
 * corrupted byte, decoded with the real decoder and judged by the real
 * checker (esd/dedup.h) inside a model of the shard's rules of
 * runtime/ps/ps.c (on_hello, on_push, on_barrier, on_rollback). Those
 * rules live inside ps.c under the shard's mutex and links, so the model
 * repeats them here; the target checks:
 *   - a frame encoded and not corrupted decodes to the same fields;
 *   - esd_dedup_check agrees with the rule written out (0: unnumbered or
 *     the next, 1: at or below the last applied, -1: a gap), and
 *     esd_dedup_fresh with it; an accepted numbered push is exactly the
 *     last applied + 1, and the last applied never moves back except at a
 *     worker's new link;
 *   - a BARRIER whose npushes differs from the pushes the link had applied
 *     fails the job, and one that matches never does;
 *   - an honest daemon (numbering 1, 2, 3, ... from its HELLO, counting its
 *     pushes in each BARRIER, alone on its worker) never fails the job;
 *   - no crash or undefined behaviour (ASan, UBSan).
 * After a job failure the model starts a new job and reads on, so one
 * input can try many sequences.
 *
 * Script: each step is one byte c, then the bytes its frame asks for (an
 * input that ends early reads zeros):
 *   c & 3         the link (0..NLINKS-1)
 *   (c >> 2) & 7  0, 1 PUSH_VALUE; 2 PUSH_GRAD; 3 BARRIER; 4 HELLO;
 *                 5 ROLLBACK; 6 PUSH_GRAD numbered 0; 7 the link closes
 *   c & 0x20      lie: a mode byte (and values) replace honest fields
 *   c & 0x40      corrupt: XOR byte (next) at offset (next) of the frame
 *   c & 0x80      HELLO: the worker comes from the next byte
 *
 * Built as a fuzzer with -DESD_FUZZ=ON and clang; the committed corpus
 * (tests/transport/corpus_push_barrier/) replays through the same entry
 * point as the test test_fuzz_push_barrier_corpus in every build.
 */
#include <esd/dedup.h>
#include <esd/proto.h>

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NLINKS   4
#define NWORKERS 3 /* workers of the job; a barrier is released when all arrive */
#define DIM      4
#define SDIM     4 /* optimizer state floats per row (PUSH_VALUE) */
#define TOKEN    UINT64_C(0x5eed)

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "fuzz_push_barrier: invariant failed at line %d: %s\n",    \
			        __LINE__, #c);                                                     \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

struct script {
	const uint8_t *p;
	size_t left;
};

/* One link as the shard sees it (struct ps_link) and as its daemon sees
 * it (sent, since, honest). */
struct link {
	int worker;      /* -1: closed, or not yet HELLO */
	uint64_t epoch;  /* the shard's rollbacks this link knows of */
	uint32_t pushes; /* push frames applied since its barrier, HELLO or ROLLBACK */
	uint64_t sent;   /* daemon: last push sequence it numbered */
	uint32_t since;  /* daemon: push frames sent since its barrier */
	bool honest;     /* every frame so far was the honest one, alone on its worker */
};

/* The shard (struct ps_barrier), and the rule written out apart from
 * esd/dedup.h (last). */
struct shard {
	struct esd_dedup dedup;
	uint64_t last[NWORKERS];
	uint64_t iter_done, epoch, rolled_to;
	uint64_t arrived_mask;
	int failed;
	struct link links[NLINKS];
};

static const struct esd_proto_limits limits = {.max_body = 1u << 12, .max_rows = 8, .max_dim = 16};

static uint8_t take8(struct script *s)
{
	if (!s->left)
		return 0;
	s->left--;
	return *s->p++;
}

static uint64_t take64(struct script *s)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)take8(s) << (8 * i);
	return v;
}

static void close_link(struct link *l)
{
	memset(l, 0, sizeof(*l));
	l->worker = -1;
}

static void new_job(struct shard *sh)
{
	memset(sh, 0, sizeof(*sh));
	esd_dedup_reset(&sh->dedup);
	for (int i = 0; i < NLINKS; i++)
		close_link(&sh->links[i]);
}

/* ps_fail_locked: only a lying daemon may cause it; the model then starts
 * a new job. */
static int fail_job(struct shard *sh, const struct link *l)
{
	CHECK(!l->honest);
	new_job(sh);
	return -EPROTO;
}

/* ---- the shard's rules (runtime/ps/ps.c) -------------------------------- */

static void on_hello(struct shard *sh, struct link *l, const struct esd_hello *h)
{
	if (h->proto_version != ESD_PROTO_VERSION || h->job_token != TOKEN ||
	    h->worker >= NWORKERS || h->dim != DIM || h->state_dim != SDIM) {
		close_link(l); /* refused: ERROR and close */
		return;
	}
	/* another open link of the same worker shares its sequence: neither
	 * can be held to the honest numbering any more */
	bool shared = false;
	for (int i = 0; i < NLINKS; i++) {
		struct link *o = &sh->links[i];
		if (o != l && o->worker == (int)h->worker) {
			o->honest = false;
			shared = true;
		}
	}
	l->worker = (int)h->worker;
	l->epoch = sh->epoch;
	l->pushes = 0;
	esd_dedup_forget(&sh->dedup, h->worker);
	sh->last[h->worker] = 0;
	CHECK(esd_dedup_check(&sh->dedup, h->worker, 1) == 0);
	l->honest = l->honest && !shared;
}

/* The rule of esd/dedup.h, written out without its arithmetic. */
static int expected_order(uint64_t last, uint64_t seq)
{
	if (seq == 0)
		return 0;
	if (seq <= last)
		return 1;
	return seq - last == 1 ? 0 : -1;
}

/* The real checker against the rule; returns its verdict. */
static int check_sequence(const struct shard *sh, uint32_t w, uint64_t seq)
{
	int order = esd_dedup_check(&sh->dedup, w, seq);
	CHECK(sh->dedup.last[w] == sh->last[w]);
	CHECK(order == expected_order(sh->last[w], seq));
	CHECK(esd_dedup_fresh(&sh->dedup, w, seq) == (order != 1));
	return order;
}

static void apply_sequence(struct shard *sh, uint32_t w, uint64_t seq)
{
	uint64_t before = sh->dedup.last[w];
	esd_dedup_applied(&sh->dedup, w, seq);
	CHECK(sh->dedup.last[w] == (seq > before ? seq : before)); /* never back */
	sh->last[w] = sh->dedup.last[w];
}

static int on_push(struct shard *sh, struct link *l, const struct esd_msg *m)
{
	const struct esd_rows *r = &m->u.rows;
	uint32_t w = (uint32_t)l->worker;
	if (r->worker != w || r->dim != DIM ||
	    (m->hdr.op == ESD_OP_PUSH_VALUE && r->state_dim != SDIM)) {
		close_link(l); /* ERROR and close, the job goes on */
		return -EPROTO;
	}
	if (l->epoch != sh->epoch) { /* a state gone back from: used up */
		apply_sequence(sh, w, r->sequence);
		return 0;
	}
	uint64_t before = sh->last[w];
	if (check_sequence(sh, w, r->sequence))
		return fail_job(sh, l);
	if (m->hdr.op == ESD_OP_PUSH_GRAD && r->iteration != sh->iter_done)
		return fail_job(sh, l);
	apply_sequence(sh, w, r->sequence);
	CHECK(r->sequence == 0 || r->sequence == before + 1); /* strictly next */
	l->pushes++;
	return 0;
}

static int on_barrier(struct shard *sh, struct link *l, const struct esd_barrier *b)
{
	uint32_t w = (uint32_t)l->worker;
	if (l->epoch != sh->epoch)
		return -ESTALE;
	if (b->npushes != l->pushes) {
		return fail_job(sh, l); /* the count mismatch is reported */
	}
	if (b->iteration != sh->iter_done + 1 || b->worker != w)
		return fail_job(sh, l);
	l->pushes = 0;
	sh->arrived_mask |= UINT64_C(1) << w;
	if (sh->arrived_mask == (UINT64_C(1) << NWORKERS) - 1) {
		sh->iter_done++;
		sh->arrived_mask = 0;
	}
	return 0;
}

/* A checkpoint reload is out of scope: the model keeps the rows and moves
 * only the barrier's state, as ps_rollback_locked does. */
static void on_rollback(struct shard *sh, struct link *l, const struct esd_rollback *r)
{
	if (!(sh->rolled_to == r->iteration && sh->iter_done == r->iteration)) {
		sh->epoch++;
		sh->rolled_to = r->iteration;
		sh->iter_done = r->iteration;
		sh->arrived_mask = 0;
	}
	l->epoch = sh->epoch;
	l->pushes = 0;
}

/* handle_frame: one decoded frame of link l. */
static void shard_frame(struct shard *sh, struct link *l, const struct esd_msg *m)
{
	if (m->hdr.op != ESD_OP_HELLO && l->worker < 0) {
		close_link(l); /* "first frame must be HELLO" */
		return;
	}
	switch (m->hdr.op) {
	case ESD_OP_HELLO:
		on_hello(sh, l, &m->u.hello);
		break;
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
		(void)on_push(sh, l, m);
		break;
	case ESD_OP_BARRIER: {
		bool honest = l->honest, stale = l->epoch != sh->epoch;
		int rc = on_barrier(sh, l, &m->u.barrier);
		CHECK(!honest || rc == 0 || (rc == -ESTALE && stale));
		break;
	}
	case ESD_OP_ROLLBACK:
		on_rollback(sh, l, &m->u.rollback);
		break;
	default:
		break; /* another op: outside this model */
	}
}

/* ---- the daemons' frames -------------------------------------------------- */

/* The push sequence a daemon numbers: the next, or a lie (a gap, a
 * re-send, unnumbered, any value). */
static uint64_t push_sequence(struct script *s, const struct link *l, bool lie)
{
	if (!lie)
		return l->sent + 1;
	switch (take8(s) & 3) {
	case 0:
		return l->sent + 1 + take8(s);
	case 1:
		return l->sent - take8(s);
	case 2:
		return 0;
	default:
		return take64(s);
	}
}

/* A PUSH_VALUE or PUSH_GRAD of one to three rows; whether it is the
 * honest one. */
static bool build_push(struct esd_buf *b, struct script *s, const struct shard *sh,
                       const struct link *l, enum esd_op op, bool numbered, bool lie,
                       struct esd_msg *want)
{
	static const float val[DIM + SDIM] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint32_t w = l->worker < 0 ? 0 : (uint32_t)l->worker;
	struct esd_rows r = {.iteration = sh->iter_done,
	                     .worker = w,
	                     .kind = ESD_XFER_UPDATE_PUSH,
	                     .dim = DIM,
	                     .state_dim = op == ESD_OP_PUSH_VALUE ? SDIM : 0};
	r.sequence = numbered ? push_sequence(s, l, lie) : 0;
	if (lie && (take8(s) & 1)) { /* a wrong worker or iteration as well */
		r.worker = take8(s) % (NWORKERS + 1);
		r.iteration = sh->iter_done + (uint64_t)(int64_t)(int8_t)take8(s);
	}
	uint32_t rows = 1 + take8(s) % 3u;
	struct esd_rows_enc e;
	int rc = esd_enc_rows_begin(&e, b, op, &r);
	for (uint32_t i = 0; i < rows && !rc; i++)
		rc = esd_enc_row(&e, esd_key_make(1, i), i, val, r.state_dim ? val + DIM : NULL);
	if (!rc)
		rc = esd_enc_rows_end(&e);
	CHECK(rc == 0);
	r.count = rows;
	want->hdr.op = (uint8_t)op;
	want->u.rows = r;
	return r.sequence == (numbered ? l->sent + 1 : 0) && r.worker == w &&
	       r.iteration == sh->iter_done;
}

static bool build_barrier(struct esd_buf *b, struct script *s, const struct shard *sh,
                          const struct link *l, bool lie, struct esd_msg *want)
{
	uint32_t w = l->worker < 0 ? 0 : (uint32_t)l->worker;
	struct esd_barrier br = {
	    .iteration = sh->iter_done + 1, .digest = TOKEN, .worker = w, .npushes = l->since};
	if (lie) {
		uint8_t mode = take8(s);
		br.npushes += (uint32_t)(int32_t)(int8_t)take8(s);
		if (mode & 1)
			br.iteration += (uint64_t)(int64_t)(int8_t)take8(s);
		if (mode & 2)
			br.worker = take8(s) % (NWORKERS + 1);
		br.checkpoint = (mode >> 2) & 1;
		br.stop = (mode >> 3) & 1;
		br.final = (mode >> 4) & 1;
	}
	CHECK(esd_enc_barrier(b, &br) == 0);
	want->hdr.op = ESD_OP_BARRIER;
	want->u.barrier = br;
	return br.npushes == l->since && br.iteration == sh->iter_done + 1 && br.worker == w;
}

static bool build_hello(struct esd_buf *b, struct script *s, uint8_t c, bool lie,
                        struct esd_msg *want)
{
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION,
	                      .worker = (c & 3) % NWORKERS,
	                      .job_token = TOKEN,
	                      .dim = DIM,
	                      .state_dim = SDIM,
	                      .nworkers = NWORKERS};
	if (c & 0x80)
		h.worker = take8(s) % (NWORKERS + 1);
	if (lie) {
		uint8_t mode = take8(s);
		h.job_token ^= mode & 1;
		h.dim += (mode >> 1) & 1;
		h.proto_version += (mode >> 2) & 1;
	}
	CHECK(esd_enc_hello(b, &h, 0) == 0);
	want->hdr.op = ESD_OP_HELLO;
	want->u.hello = h;
	return true; /* a refused HELLO closes the link: nothing to hold it to */
}

static bool build_rollback(struct esd_buf *b, struct script *s, const struct shard *sh,
                           const struct link *l, bool lie, struct esd_msg *want)
{
	uint32_t w = l->worker < 0 ? 0 : (uint32_t)l->worker;
	struct esd_rollback r = {.iteration = sh->iter_done, .worker = w};
	if (lie)
		r.iteration = (take8(s) & 1) ? take64(s) : sh->iter_done - take8(s);
	CHECK(esd_enc_rollback(b, r.iteration, r.worker) == 0);
	want->hdr.op = ESD_OP_ROLLBACK;
	want->u.rollback = r;
	return true; /* the shard goes wherever a worker asks */
}

/* XOR a byte of the frame; whether it changed. */
static bool corrupt_frame(struct esd_buf *b, struct script *s)
{
	size_t at = take8(s) % b->len;
	uint8_t x = take8(s);
	b->data[at] ^= x;
	return x != 0;
}

/* What the daemon keeps after sending the frame want. */
static void daemon_sent(struct link *l, const struct esd_msg *want, bool honest)
{
	switch (want->hdr.op) {
	case ESD_OP_HELLO:
		l->sent = 0;
		l->since = 0;
		l->honest = honest;
		return;
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
		if (want->u.rows.sequence)
			l->sent = want->u.rows.sequence;
		l->since++;
		break;
	default: /* BARRIER, ROLLBACK */
		l->since = 0;
		break;
	}
	l->honest = l->honest && honest;
}

/* ---- the link: decode, compare, hand to the shard ------------------------ */

static void check_roundtrip(const struct esd_msg *m, const struct esd_msg *want)
{
	CHECK(m->hdr.op == want->hdr.op);
	switch (m->hdr.op) {
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD: {
		const struct esd_rows *r = &m->u.rows, *x = &want->u.rows;
		CHECK(r->sequence == x->sequence && r->iteration == x->iteration &&
		      r->worker == x->worker && r->count == x->count && r->dim == x->dim &&
		      r->state_dim == x->state_dim && r->kind == x->kind);
		break;
	}
	case ESD_OP_BARRIER: {
		const struct esd_barrier *r = &m->u.barrier, *x = &want->u.barrier;
		CHECK(r->npushes == x->npushes && r->iteration == x->iteration &&
		      r->worker == x->worker && r->digest == x->digest &&
		      !r->checkpoint == !x->checkpoint && !r->stop == !x->stop &&
		      !r->final == !x->final);
		break;
	}
	case ESD_OP_HELLO:
		CHECK(m->u.hello.worker == want->u.hello.worker &&
		      m->u.hello.job_token == want->u.hello.job_token);
		break;
	case ESD_OP_ROLLBACK:
		CHECK(m->u.rollback.iteration == want->u.rollback.iteration &&
		      m->u.rollback.worker == want->u.rollback.worker);
		break;
	default:
		break;
	}
}

static void deliver(struct shard *sh, struct link *l, const struct esd_buf *b,
                    const struct esd_msg *want, bool corrupted)
{
	struct esd_msg m;
	char err[160];
	int rc = esd_proto_decode(b->data, b->len, &limits, &m, err, sizeof(err));
	if (!corrupted) {
		CHECK(rc == 0);
		check_roundtrip(&m, want);
	}
	if (rc) {
		close_link(l); /* a bad frame: ERROR and close */
		return;
	}
	if (m.hdr.op == ESD_OP_PUSH_VALUE || m.hdr.op == ESD_OP_PUSH_GRAD) {
		enum esd_xfer_kind kind;
		uint32_t rows;
		esd_proto_classify(b->data, b->len, &kind, &rows);
		CHECK(rows == m.u.rows.count && kind == (enum esd_xfer_kind)m.u.rows.kind);
	}
	shard_frame(sh, l, &m);
}

/* One step of the script: build a frame, maybe corrupt it, send it. */
static void step(struct shard *sh, struct script *s, struct esd_buf *b)
{
	uint8_t c = take8(s);
	struct link *l = &sh->links[c & 3];
	bool lie = c & 0x20, honest;
	struct esd_msg want;
	memset(&want, 0, sizeof(want));
	esd_buf_reset(b);
	switch ((c >> 2) & 7) {
	case 0:
	case 1:
		honest = build_push(b, s, sh, l, ESD_OP_PUSH_VALUE, true, lie, &want);
		break;
	case 2:
		honest = build_push(b, s, sh, l, ESD_OP_PUSH_GRAD, true, lie, &want);
		break;
	case 3:
		honest = build_barrier(b, s, sh, l, lie, &want);
		break;
	case 4:
		honest = build_hello(b, s, c, lie, &want);
		break;
	case 5:
		honest = build_rollback(b, s, sh, l, lie, &want);
		break;
	case 6:
		honest = build_push(b, s, sh, l, ESD_OP_PUSH_GRAD, false, lie, &want);
		break;
	default:
		close_link(l); /* the connection drops */
		return;
	}
	bool corrupted = (c & 0x40) && corrupt_frame(b, s);
	daemon_sent(l, &want, honest && !corrupted);
	deliver(sh, l, b, &want, corrupted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct shard sh;
	struct script s = {.p = data, .left = size};
	struct esd_buf b;
	esd_buf_init(&b);
	new_job(&sh);
	while (s.left)
		step(&sh, &s, &b);
	esd_buf_free(&b);
	return 0;
}
