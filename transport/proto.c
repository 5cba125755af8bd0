/*
 * The frame codec of docs/protocol.md, its decoding half: a decoder that
 * checks every length, count and field of a frame from an untrusted peer
 * before anyone uses it (the encoders are proto_enc.c's).
 *
 * The decoder is written so that no arithmetic on peer-supplied numbers can
 * overflow: counts are compared against the limits (all below 2^32) before
 * they are multiplied, and products are formed in 64 bits. It never
 * allocates; the caller allocates a body only after esd_frame_hdr_parse()
 * has checked the length against the configured maximum.
 */
#include "proto_internal.h"

#include <esd/proto.h>
#include <esd/err.h>
#include <esd/le.h>

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* ---- names and errors ----------------------------------------------------- */

const char *esd_op_name(unsigned op)
{
	switch (op) {
	case ESD_OP_HELLO:
		return "HELLO";
	case ESD_OP_PULL:
		return "PULL";
	case ESD_OP_PULL_RESP:
		return "PULL_RESP";
	case ESD_OP_PUSH_VALUE:
		return "PUSH_VALUE";
	case ESD_OP_PUSH_GRAD:
		return "PUSH_GRAD";
	case ESD_OP_BARRIER:
		return "BARRIER";
	case ESD_OP_ACK:
		return "ACK";
	case ESD_OP_ERROR:
		return "ERROR";
	case ESD_OP_STATS:
		return "STATS";
	case ESD_OP_SETTING:
		return "SETTING";
	case ESD_OP_ROLLBACK:
		return "ROLLBACK";
	case ESD_OP_ORDER:
		return "ORDER";
	case ESD_OP_LINK_ACK:
		return "LINK_ACK";
	case ESD_OP_LINK_BYE:
		return "LINK_BYE";
	case ESD_OP_LINK_AUTH:
		return "LINK_AUTH";
	case ESD_OP_LINK_HEARTBEAT:
		return "LINK_HEARTBEAT";
	default:
		return "op?";
	}
}

static int known_op(unsigned op)
{
	return (op >= ESD_OP_HELLO && op <= ESD_OP_APP_MAX) || op == ESD_OP_LINK_ACK ||
	       op == ESD_OP_LINK_BYE || op == ESD_OP_LINK_AUTH || op == ESD_OP_LINK_HEARTBEAT;
}

__attribute__((format(printf, 4, 5))) static int fail(int rc, char *err, size_t errlen,
                                                      const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static void limits_or_default(const struct esd_proto_limits *in, struct esd_proto_limits *out)
{
	out->max_body = in && in->max_body ? in->max_body & ~3u : ESD_PROTO_DEFAULT_MAX_BODY;
	out->max_rows = in && in->max_rows ? in->max_rows : ESD_PROTO_DEFAULT_MAX_ROWS;
	out->max_dim = in && in->max_dim ? in->max_dim : ESD_PROTO_DEFAULT_MAX_DIM;
	out->table_dims = in ? in->table_dims : NULL;
	out->ntables = in && in->table_dims ? in->ntables : 0;
}

/* ---- decoding ----------------------------------------------------------- */

int esd_frame_hdr_parse(const void *p, size_t avail, const struct esd_proto_limits *lim,
                        struct esd_frame_hdr *h, char *err, size_t errlen)
{
	struct esd_proto_limits l;
	const uint8_t *b = p;
	limits_or_default(lim, &l);
	if (avail < ESD_FRAME_HDR_SIZE)
		return fail(-EAGAIN, err, errlen, "frame header: %zu of %u bytes", avail,
		            ESD_FRAME_HDR_SIZE);
	h->magic = esd_get_le32(b);
	h->version = b[4];
	h->op = b[5];
	memcpy(&h->flags, b + 6, 2);
	h->length = esd_get_le32(b + 8);
	h->rsvd = esd_get_le32(b + 12);
	h->seq = esd_get_le64(b + 16);
	if (h->magic != ESD_PROTO_MAGIC)
		return fail(-ESD_EBADMAGIC, err, errlen,
		            "frame header: magic 0x%08x, expected 0x%08x", h->magic,
		            ESD_PROTO_MAGIC);
	if (h->version != ESD_PROTO_VERSION)
		return fail(-ESD_EBADVERSION, err, errlen,
		            "frame header: protocol version %u, this side speaks %u", h->version,
		            ESD_PROTO_VERSION);
	if (!known_op(h->op))
		return fail(-EPROTO, err, errlen, "frame header: unknown op %u", h->op);
	if (h->flags & ~ESD_FLAG_MASK)
		return fail(-EPROTO, err, errlen, "frame header: unknown flags 0x%04x", h->flags);
	if (h->rsvd)
		return fail(-EPROTO, err, errlen, "frame header: reserved field 0x%08x is not 0",
		            h->rsvd);
	if (h->length > l.max_body)
		return fail(-EMSGSIZE, err, errlen,
		            "frame header: %s body length %u above maximum %u", esd_op_name(h->op),
		            h->length, l.max_body);
	if (h->length % 4)
		return fail(-EPROTO, err, errlen,
		            "frame header: %s body length %u is not a multiple of 4",
		            esd_op_name(h->op), h->length);
	return 0;
}

static int want_len(const char *what, uint32_t have, uint64_t want, char *err, size_t errlen)
{
	if (have == want)
		return 0;
	return fail(-EPROTO, err, errlen, "%s: body length %u, its fields need %llu", what, have,
	            (unsigned long long)want);
}

/* Rows sized by their tables' dims: each row's key names its table, whose
 * dim gives its length; the rows must fill the body exactly. */
static int walk_table_rows(const struct esd_frame_hdr *h, const uint8_t *b,
			   const struct esd_proto_limits *l, struct esd_rows *r, char *err,
			   size_t errlen)
{
	const char *what = esd_op_name(h->op);
	if (r->count && r->state_dim % r->dim)
		return fail(-EPROTO, err, errlen, "%s: state_dim %u is not a multiple of dim %u",
			    what, r->state_dim, r->dim);
	r->table_dims = l->table_dims;
	r->ntables = l->ntables;
	const uint64_t per = r->count ? r->state_dim / r->dim : 0;
	uint64_t at = ROWS_HDR_SIZE;
	for (uint32_t i = 0; i < r->count; i++) {
		if (h->length - at < ROW_FIXED_SIZE)
			return fail(-EPROTO, err, errlen, "%s: body of %u bytes ends in row %u", what,
				    h->length, i);
		esd_key_t key = esd_get_le64(b + at);
		uint32_t t = esd_key_table(key);
		if (t != ESD_DENSE_TABLE && t >= r->ntables)
			return fail(-EPROTO, err, errlen, "%s: row %u has key %#llx of table %u, the "
				    "job has %u tables", what, i, (unsigned long long)key, t,
				    r->ntables);
		uint32_t d = esd_rows_key_dim(r, key);
		if (!d || d > r->dim)
			return fail(-EPROTO, err, errlen, "%s: table %u's dim %u is not in 1..%u",
				    what, t, d, r->dim);
		uint64_t sz = ROW_FIXED_SIZE + 4ull * d * (1 + per);
		if (h->length - at < sz)
			return fail(-EPROTO, err, errlen, "%s: body of %u bytes ends in row %u", what,
				    h->length, i);
		at += sz;
	}
	return want_len(what, h->length, at, err, errlen);
}

static int decode_rows(const struct esd_frame_hdr *h, const uint8_t *b,
                       const struct esd_proto_limits *l, struct esd_rows *r, char *err,
                       size_t errlen)
{
	const char *what = esd_op_name(h->op);
	if (h->length < ROWS_HDR_SIZE)
		return fail(-EPROTO, err, errlen, "%s: body length %u below its %u-byte header",
		            what, h->length, ROWS_HDR_SIZE);
	r->iteration = esd_get_le64(b);
	r->sequence = esd_get_le64(b + 8);
	r->worker = esd_get_le32(b + 16);
	r->kind = esd_get_le32(b + 20);
	r->count = esd_get_le32(b + 24);
	r->dim = esd_get_le32(b + 28);
	r->state_dim = esd_get_le32(b + 32);
	uint32_t flags = esd_get_le32(b + 36);
	if (flags & ~ESD_ROWS_TABLE_DIMS)
		return fail(-EPROTO, err, errlen, "%s: unknown row flags 0x%08x", what, flags);
	if (!(flags & ESD_ROWS_TABLE_DIMS) != !l->table_dims)
		return fail(-EPROTO, err, errlen,
			    "%s: rows %s, this side's job %s model.dims (the jobs differ)", what,
			    flags ? "sized by table dims" : "of one dim", flags ? "has no" : "has");
	switch (h->op) {
	case ESD_OP_PULL_RESP:
		if (r->kind != ESD_XFER_MISS_PULL && r->kind != ESD_XFER_OTHER)
			return fail(-EPROTO, err, errlen, "%s: kind %u, must be miss pull (%u) or "
				    "other (%u)", what, r->kind, ESD_XFER_MISS_PULL, ESD_XFER_OTHER);
		break;
	case ESD_OP_PUSH_VALUE:
		if (r->kind != ESD_XFER_UPDATE_PUSH && r->kind != ESD_XFER_EVICT_PUSH &&
		    r->kind != ESD_XFER_OTHER)
			return fail(-EPROTO, err, errlen,
				    "%s: kind %u, must be update push (%u), evict push (%u) or other "
				    "(%u)", what, r->kind, ESD_XFER_UPDATE_PUSH, ESD_XFER_EVICT_PUSH,
				    ESD_XFER_OTHER);
		break;
	default: /* PUSH_GRAD */
		if (r->kind != ESD_XFER_UPDATE_PUSH && r->kind != ESD_XFER_OTHER)
			return fail(-EPROTO, err, errlen, "%s: kind %u, must be update push (%u) or "
				    "other (%u)", what, r->kind, ESD_XFER_UPDATE_PUSH, ESD_XFER_OTHER);
		if (r->state_dim)
			return fail(-EPROTO, err, errlen, "%s: state_dim %u, gradients carry none",
			            what, r->state_dim);
		break;
	}
	if (r->count > l->max_rows)
		return fail(-E2BIG, err, errlen, "%s: %u rows above maximum %u", what, r->count,
		            l->max_rows);
	if (r->dim > l->max_dim || r->state_dim > l->max_dim)
		return fail(-E2BIG, err, errlen, "%s: dim %u / state_dim %u above maximum %u", what,
		            r->dim, r->state_dim, l->max_dim);
	if (r->dim == 0 && r->count)
		return fail(-EPROTO, err, errlen, "%s: %u rows of dimension 0", what, r->count);
	/* All factors below 2^32 after the checks: 64-bit products are exact. */
	uint64_t stride = ROW_FIXED_SIZE + 4ull * ((uint64_t)r->dim + r->state_dim);
	r->stride = (size_t)stride;
	r->data = b + ROWS_HDR_SIZE;
	if (flags)
		return walk_table_rows(h, b, l, r, err, errlen);
	return want_len(what, h->length, ROWS_HDR_SIZE + stride * r->count, err, errlen);
}

/* u64 iteration, u16 key_len, u16 value_len, key, value, zero padding to
 * a multiple of 4. Strings: 1..ESD_PROTO_MAX_SETTING bytes, no NUL. */
static int decode_setting(const struct esd_frame_hdr *h, const uint8_t *b, struct esd_setting *s,
			  char *err, size_t errlen)
{
	if (h->length < SETTING_HDR_SIZE)
		return fail(-EPROTO, err, errlen, "SETTING: body length %u below its %u-byte header",
			    h->length, SETTING_HDR_SIZE);
	s->iteration = esd_get_le64(b);
	s->key_len = (uint32_t)b[8] | (uint32_t)b[9] << 8;
	s->value_len = (uint32_t)b[10] | (uint32_t)b[11] << 8;
	if (!s->key_len || !s->value_len || s->key_len > ESD_PROTO_MAX_SETTING ||
	    s->value_len > ESD_PROTO_MAX_SETTING)
		return fail(s->key_len && s->value_len ? -E2BIG : -EPROTO, err, errlen,
			    "SETTING: key of %u and value of %u bytes, each must be 1..%u",
			    s->key_len, s->value_len, ESD_PROTO_MAX_SETTING);
	uint64_t used = SETTING_HDR_SIZE + (uint64_t)s->key_len + s->value_len;
	uint64_t padded = (used + 3) & ~3ull;
	int rc = want_len("SETTING", h->length, padded, err, errlen);
	if (rc)
		return rc;
	for (uint64_t i = SETTING_HDR_SIZE; i < used; i++)
		if (!b[i])
			return fail(-EPROTO, err, errlen, "SETTING: NUL byte at body offset %llu",
				    (unsigned long long)i);
	for (uint64_t i = used; i < padded; i++)
		if (b[i])
			return fail(-EPROTO, err, errlen, "SETTING: padding byte %llu is not 0",
				    (unsigned long long)(i - used));
	s->key = (const char *)b + SETTING_HDR_SIZE;
	s->value = s->key + s->key_len;
	return 0;
}

/* u64 iteration, u64 digest, u32 worker, u32 flags, i32 policy, u32 k,
 * u64 rate, 4 x u64 rows per kind, 3 x u32 list counts, u32 0, 4 x u64
 * bytes per kind; then k
 * bytes of assignment, zero-padded to 4, then the three lists' keys. */
static int decode_order(const struct esd_frame_hdr *h, const uint8_t *b,
			const struct esd_proto_limits *l, struct esd_order_msg *o, char *err,
			size_t errlen)
{
	if (h->length < ORDER_HDR_SIZE)
		return fail(-EPROTO, err, errlen, "ORDER: body length %u below its %u-byte header",
			    h->length, ORDER_HDR_SIZE);
	o->iteration = esd_get_le64(b);
	o->digest = esd_get_le64(b + 8);
	o->worker = esd_get_le32(b + 16);
	o->flags = esd_get_le32(b + 20);
	o->policy = (int32_t)esd_get_le32(b + 24);
	o->k = esd_get_le32(b + 28);
	o->rate_bps = esd_get_le64(b + 32);
	for (int i = 0; i < 4; i++)
		o->pred_rows[i] = esd_get_le64(b + 40 + 8 * i);
	for (int i = 0; i < 4; i++)
		o->pred_bytes[i] = esd_get_le64(b + 88 + 8 * i);
	uint64_t nkeys = 0;
	for (int i = 0; i < ESD_ORDER_NLISTS; i++) {
		o->count[i] = esd_get_le32(b + 72 + 4 * i);
		if (o->count[i] > l->max_rows)
			return fail(-E2BIG, err, errlen, "ORDER: list %d of %u keys above maximum %u",
				    i, o->count[i], l->max_rows);
		nkeys += o->count[i];
	}
	if (esd_get_le32(b + 84))
		return fail(-EPROTO, err, errlen, "ORDER: reserved field 0x%08x is not 0",
			    esd_get_le32(b + 84));
	if (o->flags & ~ESD_ORDER_FLAGS)
		return fail(-EPROTO, err, errlen, "ORDER: unknown flags 0x%08x", o->flags);
	if (o->worker >= ESD_MAX_WORKERS || o->policy < -1)
		return fail(-EPROTO, err, errlen, "ORDER: worker %u or policy %d out of range",
			    o->worker, o->policy);
	if (o->k > ESD_ORDER_MAX_K)
		return fail(-E2BIG, err, errlen, "ORDER: %u samples above maximum %u", o->k,
			    ESD_ORDER_MAX_K);
	uint64_t padded = ((uint64_t)o->k + 3) & ~3ull;
	int rc = want_len("ORDER", h->length, ORDER_HDR_SIZE + padded + 8 * nkeys, err, errlen);
	if (rc)
		return rc;
	o->assign = b + ORDER_HDR_SIZE;
	for (uint32_t i = 0; i < o->k; i++)
		if (o->assign[i] >= ESD_MAX_WORKERS)
			return fail(-EPROTO, err, errlen, "ORDER: sample %u to worker %u", i,
				    o->assign[i]);
	for (uint64_t i = o->k; i < padded; i++)
		if (o->assign[i])
			return fail(-EPROTO, err, errlen, "ORDER: padding byte %llu is not 0",
				    (unsigned long long)(i - o->k));
	const uint8_t *p = o->assign + padded;
	for (int i = 0; i < ESD_ORDER_NLISTS; i++) {
		o->keys[i] = p;
		p += 8ull * o->count[i];
	}
	return 0;
}

/* Long: one case per frame type, each checking its body's size and fields before anything is
 * used. */
static int decode_body(const struct esd_frame_hdr *h, const uint8_t *b,
                       const struct esd_proto_limits *l, struct esd_msg *m, char *err,
                       size_t errlen)
{
	int rc;
	switch (h->op) {
	case ESD_OP_HELLO:
		if ((rc = want_len("HELLO", h->length, HELLO_SIZE, err, errlen)))
			return rc;
		m->u.hello.proto_version = esd_get_le32(b);
		m->u.hello.worker = esd_get_le32(b + 4);
		m->u.hello.job_token = esd_get_le64(b + 8);
		m->u.hello.shard = esd_get_le32(b + 16);
		m->u.hello.dim = esd_get_le32(b + 20);
		m->u.hello.state_dim = esd_get_le32(b + 24);
		m->u.hello.nworkers = esd_get_le32(b + 28);
		m->u.hello.stream_digest = esd_get_le64(b + 32);
		if (m->u.hello.dim > l->max_dim || m->u.hello.state_dim > l->max_dim)
			return fail(-E2BIG, err, errlen,
			            "HELLO: dim %u / state_dim %u above maximum %u", m->u.hello.dim,
			            m->u.hello.state_dim, l->max_dim);
		return 0;
	case ESD_OP_PULL: {
		struct esd_pull *p = &m->u.pull;
		if (h->length < PULL_HDR_SIZE)
			return fail(-EPROTO, err, errlen,
			            "PULL: body length %u below its %u-byte header", h->length,
			            PULL_HDR_SIZE);
		p->iteration = esd_get_le64(b);
		p->request = esd_get_le64(b + 8);
		p->worker = esd_get_le32(b + 16);
		p->count = esd_get_le32(b + 20);
		p->kind = esd_get_le32(b + 24);
		if (p->kind != ESD_XFER_MISS_PULL && p->kind != ESD_XFER_OTHER)
			return fail(-EPROTO, err, errlen, "PULL: kind %u, must be miss pull (%u) or "
				    "other (%u)", p->kind, ESD_XFER_MISS_PULL, ESD_XFER_OTHER);
		if (esd_get_le32(b + 28))
			return fail(-EPROTO, err, errlen, "PULL: reserved field 0x%08x is not 0",
				    esd_get_le32(b + 28));
		if (p->count > l->max_rows)
			return fail(-E2BIG, err, errlen, "PULL: %u keys above maximum %u", p->count,
			            l->max_rows);
		if ((rc =
		         want_len("PULL", h->length, PULL_HDR_SIZE + 8ull * p->count, err, errlen)))
			return rc;
		p->keys = b + PULL_HDR_SIZE;
		return 0;
	}
	case ESD_OP_PULL_RESP:
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
		return decode_rows(h, b, l, &m->u.rows, err, errlen);
	case ESD_OP_BARRIER:
		if ((rc = want_len("BARRIER", h->length, BARRIER_SIZE, err, errlen)))
			return rc;
		m->u.barrier.iteration = esd_get_le64(b);
		m->u.barrier.digest = esd_get_le64(b + 8);
		m->u.barrier.worker = esd_get_le32(b + 16);
		m->u.barrier.npushes = esd_get_le32(b + 20);
		m->u.barrier.checkpoint = (h->flags & ESD_FLAG_CHECKPOINT) != 0;
		m->u.barrier.stop = (h->flags & ESD_FLAG_STOP) != 0;
		m->u.barrier.final = (h->flags & ESD_FLAG_FINAL) != 0;
		return 0;
	case ESD_OP_ACK:
		if ((rc = want_len("ACK", h->length, ACK_SIZE, err, errlen)))
			return rc;
		m->u.ack.iteration = esd_get_le64(b);
		m->u.ack.sequence = esd_get_le64(b + 8);
		m->u.ack.op = esd_get_le32(b + 16);
		m->u.ack.status = (int32_t)esd_get_le32(b + 20);
		m->u.ack.setting = (h->flags & ESD_FLAG_SETTING) != 0;
		m->u.ack.stop = (h->flags & ESD_FLAG_STOP) != 0;
		return 0;
	case ESD_OP_SETTING:
		return decode_setting(h, b, &m->u.setting, err, errlen);
	case ESD_OP_ROLLBACK:
		if ((rc = want_len("ROLLBACK", h->length, ROLLBACK_SIZE, err, errlen)))
			return rc;
		m->u.rollback.iteration = esd_get_le64(b);
		m->u.rollback.worker = esd_get_le32(b + 8);
		if (esd_get_le32(b + 12))
			return fail(-EPROTO, err, errlen, "ROLLBACK: reserved field is not 0");
		return 0;
	case ESD_OP_ORDER:
		return decode_order(h, b, l, &m->u.order, err, errlen);
	case ESD_OP_ERROR: {
		struct esd_error *e = &m->u.error;
		if (h->length < ERROR_HDR_SIZE)
			return fail(-EPROTO, err, errlen,
			            "ERROR: body length %u below its %u-byte header", h->length,
			            ERROR_HDR_SIZE);
		e->code = (int32_t)esd_get_le32(b);
		e->len = esd_get_le32(b + 4);
		if (e->len > ESD_PROTO_MAX_ERROR_TEXT)
			return fail(-E2BIG, err, errlen, "ERROR: text of %u bytes above maximum %u",
			            e->len, ESD_PROTO_MAX_ERROR_TEXT);
		uint64_t padded = ((uint64_t)e->len + 3) & ~3ull;
		if ((rc = want_len("ERROR", h->length, ERROR_HDR_SIZE + padded, err, errlen)))
			return rc;
		for (uint64_t i = e->len; i < padded; i++)
			if (b[ERROR_HDR_SIZE + i])
				return fail(-EPROTO, err, errlen,
				            "ERROR: padding byte %llu is not 0",
				            (unsigned long long)i);
		e->text = (const char *)b + ERROR_HDR_SIZE;
		return 0;
	}
	case ESD_OP_STATS: {
		if (h->length < STATS_HDR_SIZE)
			return fail(-EPROTO, err, errlen,
			            "STATS: body length %u below its %u-byte header", h->length,
			            STATS_HDR_SIZE);
		m->u.stats.count = esd_get_le32(b);
		if (esd_get_le32(b + 4))
			return fail(-EPROTO, err, errlen, "STATS: reserved field is not 0");
		if (m->u.stats.count > ESD_PROTO_MAX_STATS)
			return fail(-E2BIG, err, errlen, "STATS: %u entries above maximum %u",
			            m->u.stats.count, ESD_PROTO_MAX_STATS);
		if ((rc = want_len("STATS", h->length,
		                   STATS_HDR_SIZE + (uint64_t)STATS_ENT_SIZE * m->u.stats.count,
		                   err, errlen)))
			return rc;
		m->u.stats.data = b + STATS_HDR_SIZE;
		for (uint32_t i = 0; i < m->u.stats.count; i++)
			if (esd_get_le32(m->u.stats.data + i * STATS_ENT_SIZE) >= ESD_XFER_NKINDS)
				return fail(-EPROTO, err, errlen, "STATS: entry %u has kind %u", i,
				            esd_get_le32(m->u.stats.data + i * STATS_ENT_SIZE));
		return 0;
	}
	case ESD_OP_LINK_ACK:
		if ((rc = want_len("LINK_ACK", h->length, 8, err, errlen)))
			return rc;
		m->u.link_ack = esd_get_le64(b);
		return 0;
	case ESD_OP_LINK_BYE:
		if ((rc = want_len("LINK_BYE", h->length, 4, err, errlen)))
			return rc;
		m->u.link_bye = esd_get_le32(b);
		if (m->u.link_bye > 1)
			return fail(-EPROTO, err, errlen, "LINK_BYE: phase %u", m->u.link_bye);
		return 0;
	case ESD_OP_LINK_AUTH:
		if ((rc = want_len("LINK_AUTH", h->length, ESD_LINK_AUTH_BODY, err, errlen)))
			return rc;
		m->u.link_auth.step = esd_get_le32(b);
		if (m->u.link_auth.step < 1 || m->u.link_auth.step > 3)
			return fail(-EPROTO, err, errlen, "LINK_AUTH: step %u", m->u.link_auth.step);
		if (esd_get_le32(b + 4) != ESD_LINK_AUTH_VERSION)
			return fail(-EPROTO, err, errlen, "LINK_AUTH: version %u, this side speaks %u",
				    esd_get_le32(b + 4), ESD_LINK_AUTH_VERSION);
		m->u.link_auth.suites = esd_get_le32(b + 8);
		if (esd_get_le32(b + 12))
			return fail(-EPROTO, err, errlen, "LINK_AUTH: reserved field 0x%08x is not 0",
				    esd_get_le32(b + 12));
		m->u.link_auth.a = b + 16;
		m->u.link_auth.b = b + 16 + ESD_LINK_AUTH_FIELD;
		return 0;
	case ESD_OP_LINK_HEARTBEAT:
		if ((rc = want_len("LINK_HEARTBEAT", h->length, ESD_LINK_HEARTBEAT_BODY, err,
				   errlen)))
			return rc;
		m->u.link_heartbeat.beat = esd_get_le64(b);
		m->u.link_heartbeat.flags = esd_get_le32(b + 8);
		if (!m->u.link_heartbeat.beat)
			return fail(-EPROTO, err, errlen, "LINK_HEARTBEAT: beat 0 (they count from 1)");
		if (m->u.link_heartbeat.flags & ~ESD_BEAT_ASIDE)
			return fail(-EPROTO, err, errlen, "LINK_HEARTBEAT: unknown flags 0x%08x",
				    m->u.link_heartbeat.flags);
		if (esd_get_le32(b + 12))
			return fail(-EPROTO, err, errlen,
				    "LINK_HEARTBEAT: reserved field 0x%08x is not 0",
				    esd_get_le32(b + 12));
		return 0;
	}
	return fail(-EPROTO, err, errlen, "unknown op %u", h->op);
}

int esd_proto_decode(const void *frame, size_t len, const struct esd_proto_limits *lim,
                     struct esd_msg *out, char *err, size_t errlen)
{
	struct esd_proto_limits l;
	int rc;
	limits_or_default(lim, &l);
	memset(out, 0, sizeof(*out));
	if (!frame && len)
		return fail(-EINVAL, err, errlen, "frame: NULL buffer");
	rc = esd_frame_hdr_parse(frame, len, &l, &out->hdr, err, errlen);
	if (rc == -EAGAIN)
		return fail(-EPROTO, err, errlen, "frame: %zu bytes, shorter than a header", len);
	if (rc)
		return rc;
	if (len - ESD_FRAME_HDR_SIZE != out->hdr.length)
		return fail(-EPROTO, err, errlen, "%s: header says %u body bytes, frame has %zu",
		            esd_op_name(out->hdr.op), out->hdr.length, len - ESD_FRAME_HDR_SIZE);
	return decode_body(&out->hdr, (const uint8_t *)frame + ESD_FRAME_HDR_SIZE, &l, out, err,
	                   errlen);
}

esd_key_t esd_msg_key(const struct esd_msg *m, uint32_t i)
{
	return esd_get_le64(m->u.pull.keys + 8ull * i);
}

esd_key_t esd_order_key(const struct esd_order_msg *o, int l, uint32_t i)
{
	return esd_get_le64(o->keys[l] + 8ull * i);
}

void esd_rows_get(const struct esd_rows *r, uint32_t i, struct esd_row_view *out)
{
	const uint8_t *p = r->data + r->stride * i;
	out->key = esd_get_le64(p);
	out->clock = esd_get_le64(p + 8);
	out->value = (const float *)(const void *)(p + ROW_FIXED_SIZE);
	out->state = r->state_dim ? out->value + r->dim : NULL;
	out->dim = r->dim;
	out->state_len = r->state_dim;
}

const uint8_t *esd_rows_next(const struct esd_rows *r, const uint8_t *p,
			     struct esd_row_view *out)
{
	out->key = esd_get_le64(p);
	out->clock = esd_get_le64(p + 8);
	out->dim = esd_rows_key_dim(r, out->key);
	out->state_len = r->dim ? (uint32_t)((uint64_t)r->state_dim * out->dim / r->dim) : 0;
	out->value = (const float *)(const void *)(p + ROW_FIXED_SIZE);
	out->state = out->state_len ? out->value + out->dim : NULL;
	return p + ROW_FIXED_SIZE + 4u * ((size_t)out->dim + out->state_len);
}

void esd_row_view_unpack(const struct esd_row_view *v, uint32_t dim, uint32_t state_dim,
			 float *value, float *state)
{
	const uint32_t d = v->dim;
	memcpy(value, v->value, (size_t)d * sizeof(float));
	memset(value + d, 0, (size_t)(dim - d) * sizeof(float));
	if (!state || !state_dim)
		return;
	for (uint32_t blk = 0; blk < state_dim / dim; blk++) {
		float *s = state + (size_t)blk * dim;
		if (v->state)
			memcpy(s, v->state + (size_t)blk * d, (size_t)d * sizeof(float));
		else
			memset(s, 0, (size_t)d * sizeof(float));
		memset(s + d, 0, (size_t)(dim - d) * sizeof(float));
	}
}

void esd_stats_get(const struct esd_stats_msg *s, uint32_t i, struct esd_stats_entry *out)
{
	const uint8_t *p = s->data + (size_t)i * STATS_ENT_SIZE;
	out->kind = esd_get_le32(p);
	out->tx_bytes = esd_get_le64(p + 8);
	out->tx_rows = esd_get_le64(p + 16);
	out->rx_bytes = esd_get_le64(p + 24);
	out->rx_rows = esd_get_le64(p + 32);
}

void esd_proto_classify(const void *frame, size_t len, enum esd_xfer_kind *kind, uint32_t *rows)
{
	const uint8_t *b = frame;
	*kind = ESD_XFER_OTHER;
	*rows = 0;
	if (len < ESD_FRAME_HDR_SIZE)
		return;
	unsigned op = b[5];
	b += ESD_FRAME_HDR_SIZE;
	len -= ESD_FRAME_HDR_SIZE;
	switch (op) {
	case ESD_OP_PULL:
		*kind = len >= PULL_HDR_SIZE && esd_get_le32(b + 24) == ESD_XFER_OTHER
		                ? ESD_XFER_OTHER
		                : ESD_XFER_MISS_PULL;
		return;
	case ESD_OP_PULL_RESP:
	case ESD_OP_PUSH_VALUE:
	case ESD_OP_PUSH_GRAD:
		if (len < ROWS_HDR_SIZE)
			return;
		*rows = esd_get_le32(b + 24);
		*kind = esd_get_le32(b + 20) < ESD_XFER_NKINDS
		                ? (enum esd_xfer_kind)esd_get_le32(b + 20)
		                : ESD_XFER_OTHER;
		return;
	default:
		return;
	}
}
