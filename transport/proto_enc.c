/*
 * The frame codec of docs/protocol.md, its encoding half: encoders that
 * append whole frames to a growable buffer, and gather lists that send
 * rows from the caller's memory without copying them (the decoder is
 * proto.c's).
 */
#include "proto_internal.h"

#include <esd/proto.h>
#include <esd/err.h>
#include <esd/le.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* ---- buffer ------------------------------------------------------------- */

void esd_buf_init(struct esd_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void esd_buf_reset(struct esd_buf *b)
{
	b->len = 0;
}

void esd_buf_free(struct esd_buf *b)
{
	if (!b)
		return;
	free(b->data);
	esd_buf_init(b);
}

int esd_buf_reserve(struct esd_buf *b, size_t n)
{
	if (n > SIZE_MAX / 2 - b->len)
		return -EOVERFLOW;
	if (b->len + n <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + n)
		cap *= 2;
	/* 16-byte aligned so frames built here keep their floats aligned. */
	uint8_t *d = aligned_alloc(16, (cap + 15) & ~(size_t)15);
	if (!d)
		return -ENOMEM;
	if (b->len)
		memcpy(d, b->data, b->len);
	free(b->data);
	b->data = d;
	b->cap = cap;
	return 0;
}

/* ---- encoding ----------------------------------------------------------- */

/* Append a header and room for body bytes; returns the body pointer. */
static uint8_t *begin_frame(struct esd_buf *b, uint8_t op, uint16_t flags, uint32_t body)
{
	if (esd_buf_reserve(b, ESD_FRAME_HDR_SIZE + (size_t)body))
		return NULL;
	uint8_t *p = b->data + b->len;
	esd_put_le32(p, ESD_PROTO_MAGIC);
	p[4] = ESD_PROTO_VERSION;
	p[5] = op;
	esd_put_le16(p + 6, flags);
	esd_put_le32(p + 8, body);
	esd_put_le32(p + 12, 0);
	esd_put_le64(p + 16, 0);
	b->len += ESD_FRAME_HDR_SIZE + body;
	return p + ESD_FRAME_HDR_SIZE;
}

int esd_enc_hello(struct esd_buf *b, const struct esd_hello *h, uint16_t flags)
{
	uint8_t *p = begin_frame(b, ESD_OP_HELLO, flags & ESD_FLAG_REPLY, HELLO_SIZE);
	if (!p)
		return -ENOMEM;
	esd_put_le32(p, h->proto_version);
	esd_put_le32(p + 4, h->worker);
	esd_put_le64(p + 8, h->job_token);
	esd_put_le32(p + 16, h->shard);
	esd_put_le32(p + 20, h->dim);
	esd_put_le32(p + 24, h->state_dim);
	esd_put_le32(p + 28, h->nworkers);
	esd_put_le64(p + 32, h->stream_digest);
	return 0;
}

int esd_enc_pull(struct esd_buf *b, uint64_t iteration, uint64_t request, uint32_t worker,
                 const esd_key_t *keys, uint32_t count)
{
	return esd_enc_pull_kind(b, iteration, request, worker, ESD_XFER_MISS_PULL, keys, count);
}

int esd_enc_pull_kind(struct esd_buf *b, uint64_t iteration, uint64_t request, uint32_t worker,
		      enum esd_xfer_kind kind, const esd_key_t *keys, uint32_t count)
{
	if (count > ESD_PROTO_DEFAULT_MAX_ROWS || (count && !keys) ||
	    (kind != ESD_XFER_MISS_PULL && kind != ESD_XFER_OTHER))
		return -EINVAL;
	uint8_t *p = begin_frame(b, ESD_OP_PULL, 0, PULL_HDR_SIZE + 8u * count);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, iteration);
	esd_put_le64(p + 8, request);
	esd_put_le32(p + 16, worker);
	esd_put_le32(p + 20, count);
	esd_put_le32(p + 24, kind);
	esd_put_le32(p + 28, 0);
	if (count)
		memcpy(p + PULL_HDR_SIZE, keys, 8u * count);
	return 0;
}

int esd_enc_barrier(struct esd_buf *b, const struct esd_barrier *br)
{
	uint16_t flags = (br->checkpoint ? ESD_FLAG_CHECKPOINT : 0) |
			 (br->stop ? ESD_FLAG_STOP : 0) | (br->final ? ESD_FLAG_FINAL : 0);
	uint8_t *p = begin_frame(b, ESD_OP_BARRIER, flags, BARRIER_SIZE);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, br->iteration);
	esd_put_le64(p + 8, br->digest);
	esd_put_le32(p + 16, br->worker);
	esd_put_le32(p + 20, br->npushes);
	return 0;
}

int esd_enc_ack(struct esd_buf *b, const struct esd_ack *a)
{
	uint16_t flags = (a->setting ? ESD_FLAG_SETTING : 0) | (a->stop ? ESD_FLAG_STOP : 0);
	uint8_t *p = begin_frame(b, ESD_OP_ACK, flags, ACK_SIZE);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, a->iteration);
	esd_put_le64(p + 8, a->sequence);
	esd_put_le32(p + 16, a->op);
	esd_put_le32(p + 20, (uint32_t)a->status);
	return 0;
}

int esd_enc_rollback(struct esd_buf *b, uint64_t iteration, uint32_t worker)
{
	uint8_t *p = begin_frame(b, ESD_OP_ROLLBACK, 0, ROLLBACK_SIZE);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, iteration);
	esd_put_le32(p + 8, worker);
	esd_put_le32(p + 12, 0);
	return 0;
}

int esd_enc_setting(struct esd_buf *b, uint64_t iteration, const char *key, const char *value)
{
	size_t kl = key ? strnlen(key, ESD_PROTO_MAX_SETTING + 1) : 0;
	size_t vl = value ? strnlen(value, ESD_PROTO_MAX_SETTING + 1) : 0;
	if (!kl || !vl || kl > ESD_PROTO_MAX_SETTING || vl > ESD_PROTO_MAX_SETTING)
		return -EINVAL;
	uint32_t used = SETTING_HDR_SIZE + (uint32_t)(kl + vl);
	uint32_t padded = (used + 3) & ~3u;
	uint8_t *p = begin_frame(b, ESD_OP_SETTING, 0, padded);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, iteration);
	esd_put_le16(p + 8, (uint16_t)kl);
	esd_put_le16(p + 10, (uint16_t)vl);
	memcpy(p + SETTING_HDR_SIZE, key, kl);
	memcpy(p + SETTING_HDR_SIZE + kl, value, vl);
	memset(p + used, 0, padded - used);
	return 0;
}

/* An ORDER's header fields and its frame of body bytes; NULL: no memory. */
static uint8_t *begin_order(struct esd_buf *b, const struct esd_order_msg *o, uint64_t nkeys)
{
	uint32_t padded = (o->k + 3) & ~3u;
	uint8_t *p = begin_frame(b, ESD_OP_ORDER, 0,
				 ORDER_HDR_SIZE + padded + (uint32_t)(8 * nkeys));
	if (!p)
		return NULL;
	esd_put_le64(p, o->iteration);
	esd_put_le64(p + 8, o->digest);
	esd_put_le32(p + 16, o->worker);
	esd_put_le32(p + 20, o->flags);
	esd_put_le32(p + 24, (uint32_t)o->policy);
	esd_put_le32(p + 28, o->k);
	esd_put_le64(p + 32, o->rate_bps);
	for (int i = 0; i < 4; i++)
		esd_put_le64(p + 40 + 8 * i, o->pred_rows[i]);
	for (int i = 0; i < ESD_ORDER_NLISTS; i++)
		esd_put_le32(p + 72 + 4 * i, o->count[i]);
	esd_put_le32(p + 84, 0);
	for (int i = 0; i < 4; i++)
		esd_put_le64(p + 88 + 8 * i, o->pred_bytes[i]);
	memset(p + ORDER_HDR_SIZE + o->k, 0, padded - o->k);
	return p;
}

static int order_args_ok(const struct esd_order_msg *o, uint64_t *nkeys)
{
	*nkeys = 0;
	for (int i = 0; i < ESD_ORDER_NLISTS; i++) {
		if (o->count[i] > ESD_PROTO_DEFAULT_MAX_ROWS)
			return 0;
		*nkeys += o->count[i];
	}
	return o->k <= ESD_ORDER_MAX_K && !(o->flags & ~ESD_ORDER_FLAGS) &&
	       o->worker < ESD_MAX_WORKERS && o->policy >= -1;
}

int esd_enc_order(struct esd_buf *b, const struct esd_order_msg *o, const uint32_t *assign,
		  const esd_key_t *const lists[ESD_ORDER_NLISTS])
{
	uint64_t nkeys;
	if (!order_args_ok(o, &nkeys) || (o->k && !assign))
		return -EINVAL;
	for (int i = 0; i < ESD_ORDER_NLISTS; i++)
		if (o->count[i] && !lists[i])
			return -EINVAL;
	for (uint32_t i = 0; i < o->k; i++)
		if (assign[i] >= ESD_MAX_WORKERS)
			return -EINVAL;
	uint8_t *p = begin_order(b, o, nkeys);
	if (!p)
		return -ENOMEM;
	uint8_t *a = p + ORDER_HDR_SIZE;
	for (uint32_t i = 0; i < o->k; i++)
		a[i] = (uint8_t)assign[i];
	uint8_t *q = a + ((o->k + 3) & ~3u);
	for (int i = 0; i < ESD_ORDER_NLISTS; i++)
		for (uint32_t j = 0; j < o->count[i]; j++, q += 8)
			esd_put_le64(q, lists[i][j]);
	return 0;
}

int esd_enc_order_copy(struct esd_buf *b, const struct esd_order_msg *o)
{
	uint64_t nkeys;
	if (!order_args_ok(o, &nkeys) || (o->k && !o->assign))
		return -EINVAL;
	uint8_t *p = begin_order(b, o, nkeys);
	if (!p)
		return -ENOMEM;
	memcpy(p + ORDER_HDR_SIZE, o->assign, o->k);
	uint8_t *q = p + ORDER_HDR_SIZE + ((o->k + 3) & ~3u);
	for (int i = 0; i < ESD_ORDER_NLISTS; i++) {
		memcpy(q, o->keys[i], 8 * (size_t)o->count[i]);
		q += 8 * (size_t)o->count[i];
	}
	return 0;
}

int esd_enc_error(struct esd_buf *b, int32_t code, const char *text)
{
	size_t len = text ? strnlen(text, ESD_PROTO_MAX_ERROR_TEXT) : 0;
	uint32_t padded = (uint32_t)((len + 3) & ~(size_t)3);
	uint8_t *p = begin_frame(b, ESD_OP_ERROR, 0, ERROR_HDR_SIZE + padded);
	if (!p)
		return -ENOMEM;
	esd_put_le32(p, (uint32_t)code);
	esd_put_le32(p + 4, (uint32_t)len);
	memset(p + ERROR_HDR_SIZE, 0, padded);
	if (len)
		memcpy(p + ERROR_HDR_SIZE, text, len);
	return 0;
}

int esd_enc_stats(struct esd_buf *b, const struct esd_stats_entry *e, uint32_t count,
                  uint16_t flags)
{
	if (count > ESD_PROTO_MAX_STATS || (count && !e))
		return -EINVAL;
	for (uint32_t i = 0; i < count; i++)
		if (e[i].kind >= ESD_XFER_NKINDS)
			return -EINVAL;
	uint8_t *p = begin_frame(b, ESD_OP_STATS, flags & ESD_FLAG_REPLY,
	                         STATS_HDR_SIZE + STATS_ENT_SIZE * count);
	if (!p)
		return -ENOMEM;
	esd_put_le32(p, count);
	esd_put_le32(p + 4, 0);
	for (uint32_t i = 0; i < count; i++) {
		uint8_t *q = p + STATS_HDR_SIZE + STATS_ENT_SIZE * i;
		esd_put_le32(q, e[i].kind);
		esd_put_le32(q + 4, 0);
		esd_put_le64(q + 8, e[i].tx_bytes);
		esd_put_le64(q + 16, e[i].tx_rows);
		esd_put_le64(q + 24, e[i].rx_bytes);
		esd_put_le64(q + 32, e[i].rx_rows);
	}
	return 0;
}

int esd_enc_link_ack(struct esd_buf *b, uint64_t seq)
{
	uint8_t *p = begin_frame(b, ESD_OP_LINK_ACK, 0, 8);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, seq);
	return 0;
}

int esd_enc_link_bye(struct esd_buf *b, uint32_t phase)
{
	uint8_t *p = begin_frame(b, ESD_OP_LINK_BYE, 0, 4);
	if (!p)
		return -ENOMEM;
	esd_put_le32(p, phase);
	return 0;
}

int esd_enc_link_heartbeat(struct esd_buf *b, uint64_t beat, uint32_t flags)
{
	uint8_t *p = begin_frame(b, ESD_OP_LINK_HEARTBEAT, 0, ESD_LINK_HEARTBEAT_BODY);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, beat);
	esd_put_le32(p + 8, flags);
	esd_put_le32(p + 12, 0);
	return 0;
}

int esd_enc_link_auth(struct esd_buf *b, uint32_t step, uint32_t suites, const uint8_t *a,
		      const uint8_t *bb)
{
	uint8_t *p = begin_frame(b, ESD_OP_LINK_AUTH, 0, ESD_LINK_AUTH_BODY);
	if (!p)
		return -ENOMEM;
	memset(p, 0, ESD_LINK_AUTH_BODY);
	esd_put_le32(p, step);
	esd_put_le32(p + 4, ESD_LINK_AUTH_VERSION);
	esd_put_le32(p + 8, suites);
	if (a)
		memcpy(p + 16, a, ESD_LINK_AUTH_FIELD);
	if (bb)
		memcpy(p + 16 + ESD_LINK_AUTH_FIELD, bb, ESD_LINK_AUTH_FIELD);
	return 0;
}

int esd_enc_rows_begin(struct esd_rows_enc *e, struct esd_buf *b, enum esd_op op,
                       const struct esd_rows *r)
{
	if (op != ESD_OP_PULL_RESP && op != ESD_OP_PUSH_VALUE && op != ESD_OP_PUSH_GRAD)
		return -EINVAL;
	if ((op == ESD_OP_PULL_RESP && r->kind != ESD_XFER_MISS_PULL &&
	     r->kind != ESD_XFER_OTHER) ||
	    (op == ESD_OP_PUSH_VALUE && r->kind != ESD_XFER_UPDATE_PUSH &&
	     r->kind != ESD_XFER_EVICT_PUSH && r->kind != ESD_XFER_OTHER) ||
	    (op == ESD_OP_PUSH_GRAD &&
	     ((r->kind != ESD_XFER_UPDATE_PUSH && r->kind != ESD_XFER_OTHER) || r->state_dim)))
		return -EINVAL;
	if (r->dim == 0 || r->dim > ESD_PROTO_DEFAULT_MAX_DIM ||
	    r->state_dim > ESD_PROTO_DEFAULT_MAX_DIM ||
	    (r->table_dims && r->state_dim % r->dim))
		return -EINVAL;
	e->b = b;
	e->start = b->len;
	e->ext = 0;
	e->op = (uint8_t)op;
	e->r = *r;
	e->r.count = 0;
	e->r.stride = ROW_FIXED_SIZE + 4u * ((size_t)r->dim + r->state_dim);
	uint8_t *p = begin_frame(b, e->op, 0, ROWS_HDR_SIZE);
	if (!p)
		return -ENOMEM;
	esd_put_le64(p, r->iteration);
	esd_put_le64(p + 8, r->sequence);
	esd_put_le32(p + 16, r->worker);
	esd_put_le32(p + 20, r->kind);
	esd_put_le32(p + 24, 0);
	esd_put_le32(p + 28, r->dim);
	esd_put_le32(p + 32, r->state_dim);
	esd_put_le32(p + 36, r->table_dims ? ESD_ROWS_TABLE_DIMS : 0);
	return 0;
}

size_t esd_enc_rows_body(const struct esd_rows_enc *e)
{
	return e->b->len - e->start - ESD_FRAME_HDR_SIZE + e->ext;
}

/* Value and state floats of key's rows in the frame. */
static void row_floats(const struct esd_rows_enc *e, esd_key_t key, size_t *d, size_t *sd)
{
	*d = esd_rows_key_dim(&e->r, key);
	*sd = (size_t)e->r.state_dim * *d / e->r.dim;
}

size_t esd_enc_row_size(const struct esd_rows_enc *e, esd_key_t key)
{
	size_t d, sd;
	row_floats(e, key, &d, &sd);
	return ROW_FIXED_SIZE + 4u * (d + sd);
}

/* One more row of size bytes fits the frame's row and body maxima. */
static bool row_fits(const struct esd_rows_enc *e, size_t size)
{
	return e->r.count < ESD_PROTO_DEFAULT_MAX_ROWS &&
	       esd_enc_rows_body(e) + size <= ESD_PROTO_DEFAULT_MAX_BODY;
}

int esd_enc_row_reserve(struct esd_rows_enc *e, esd_key_t key, uint64_t clock, float **value,
                        float **state)
{
	size_t d, sd;
	row_floats(e, key, &d, &sd);
	const size_t size = ROW_FIXED_SIZE + 4u * (d + sd);
	if (!row_fits(e, size))
		return -E2BIG;
	int rc = esd_buf_reserve(e->b, size);
	if (rc)
		return rc;
	uint8_t *p = e->b->data + e->b->len;
	esd_put_le64(p, key);
	esd_put_le64(p + 8, clock);
	*value = (float *)(void *)(p + ROW_FIXED_SIZE);
	if (state)
		*state = sd ? *value + d : NULL;
	e->b->len += size;
	e->r.count++;
	return 0;
}

/* A row's state of blocks of dim floats as blocks of d (d = dim: a copy). */
static void pack_state(float *s, const float *state, size_t d, size_t dim, size_t sd)
{
	if (d == dim) {
		memcpy(s, state, 4u * sd);
		return;
	}
	for (size_t blk = 0; blk < sd / d; blk++)
		memcpy(s + blk * d, state + blk * dim, 4u * d);
}

int esd_enc_row(struct esd_rows_enc *e, esd_key_t key, uint64_t clock, const float *value,
                const float *state)
{
	float *v, *s;
	int rc = esd_enc_row_reserve(e, key, clock, &v, &s);
	if (rc)
		return rc;
	size_t d, sd;
	row_floats(e, key, &d, &sd);
	memcpy(v, value, 4u * d);
	if (sd) {
		if (state)
			pack_state(s, state, d, e->r.dim, sd);
		else
			memset(s, 0, 4u * sd);
	}
	return 0;
}

int esd_enc_rows_end(struct esd_rows_enc *e)
{
	uint8_t *h = e->b->data + e->start;
	esd_put_le32(h + 8, (uint32_t)(e->b->len - e->start - ESD_FRAME_HDR_SIZE + e->ext));
	esd_put_le32(h + ESD_FRAME_HDR_SIZE + 24, e->r.count);
	return 0;
}

/* ---- gather lists (zero copy) ------------------------------------------ */

void esd_gather_init(struct esd_gather *g)
{
	memset(g, 0, sizeof(*g));
}

void esd_gather_reset(struct esd_gather *g)
{
	g->n = 0;
	g->mark = 0;
	g->ext = 0;
}

void esd_gather_free(struct esd_gather *g)
{
	free(g->v);
	free(g->iov);
	esd_gather_init(g);
}

/* Room for k more spans. */
static int gather_room(struct esd_gather *g, size_t k)
{
	if (g->cap - g->n >= k)
		return 0;
	size_t cap = g->cap ? 2 * g->cap : 64;
	while (cap - g->n < k)
		cap *= 2;
	struct esd_gather_span *v = realloc(g->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	g->v = v;
	g->cap = cap;
	return 0;
}

static int gather_push(struct esd_gather *g, const void *ext, size_t off, size_t len)
{
	if (!len)
		return 0;
	int rc = gather_room(g, 1);
	if (!rc)
		g->v[g->n++] = (struct esd_gather_span){.ext = ext, .off = off, .len = len};
	return rc;
}

/* b's bytes from the mark to its end become a span. */
static int gather_take_buf(struct esd_gather *g, const struct esd_buf *b)
{
	int rc = gather_push(g, NULL, g->mark, b->len - g->mark);
	if (!rc)
		g->mark = b->len;
	return rc;
}

int esd_enc_row_ref(struct esd_rows_enc *e, struct esd_gather *g, esd_key_t key,
                    uint64_t clock, const float *value, const float *state)
{
	if (e->r.state_dim && !state)
		return esd_enc_row(e, key, clock, value, NULL);
	size_t d, sd;
	row_floats(e, key, &d, &sd);
	/* a state of blocks of dim floats goes as its blocks' first d */
	const size_t blocks = d < e->r.dim && sd ? sd / d : 1;
	size_t floats = 4u * (d + sd);
	if (!row_fits(e, ROW_FIXED_SIZE + floats))
		return -E2BIG;
	/* room first, so a failure leaves b and g as they were */
	int rc = gather_room(g, 2 + blocks);
	if (!rc)
		rc = esd_buf_reserve(e->b, ROW_FIXED_SIZE);
	if (rc)
		return rc;
	uint8_t *p = e->b->data + e->b->len;
	esd_put_le64(p, key);
	esd_put_le64(p + 8, clock);
	e->b->len += ROW_FIXED_SIZE;
	gather_take_buf(g, e->b);
	gather_push(g, value, 0, 4u * d);
	for (size_t blk = 0; blk < blocks; blk++)
		gather_push(g, state, 4u * blk * e->r.dim, 4u * sd / blocks);
	e->ext += floats;
	g->ext += floats;
	e->r.count++;
	return 0;
}

int esd_gather_iov(struct esd_gather *g, const struct esd_buf *b, void **iov, int *n)
{
	int rc = gather_take_buf(g, b);
	if (rc)
		return rc;
	if (g->iov_cap < g->n) {
		void *v = realloc(g->iov, g->n * sizeof(struct iovec));
		if (!v)
			return -ENOMEM;
		g->iov = v;
		g->iov_cap = g->n;
	}
	struct iovec *v = g->iov;
	for (size_t i = 0; i < g->n; i++) {
		const struct esd_gather_span *s = &g->v[i];
		v[i].iov_base = (void *)(s->ext ? (const uint8_t *)s->ext + s->off : b->data + s->off);
		v[i].iov_len = s->len;
	}
	*iov = g->iov;
	*n = (int)g->n;
	return 0;
}
