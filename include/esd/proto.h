/*
 * esd/proto.h - the wire protocol between node daemons (esdd) and PS shards
 * (esd-ps): frame header, batched message bodies, encoder and decoder.
 *
 * Model
 * -----
 * Every message is one frame: a 24-byte header (magic "ESDF", version, op,
 * flags, body length, link sequence number) followed by a body whose layout
 * depends on the op. All integers are little-endian; floats are IEEE-754
 * binary32, little-endian. Bodies carry many rows per frame (a batch). The
 * full specification, field by field, is docs/protocol.md.
 *
 * Encoding appends whole frames to a growable buffer (struct esd_buf), so a
 * batch of frames can be built in one buffer and handed to esd_link_send()
 * (esd/transport.h) at once. Row ops (PULL_RESP, PUSH_VALUE, PUSH_GRAD) are
 * built with a begin / row / end sequence; esd_enc_row_reserve() hands back
 * pointers into the frame so a row can be written in place (no bounce copy
 * from the cache).
 *
 * Decoding never trusts the peer: esd_frame_hdr_parse() checks magic,
 * version, op, flags and the body length against the configured maximum
 * before anyone allocates for the body; esd_proto_decode() checks every
 * count, dimension and length of the body against the frame and the limits
 * (struct esd_proto_limits) with overflow-safe arithmetic. A decoded message
 * (struct esd_msg) is a view into the caller's frame buffer: it owns nothing
 * and is valid while that buffer is.
 *
 * Caveats
 * -------
 * - Floats and keys inside a view are read through the accessors
 *   (esd_msg_key(), esd_rows_get()): keys are 8-byte fields at 4-byte
 *   aligned offsets, so they are copied out, while float pointers point into
 *   the frame (frames are multiples of 4 bytes, so a frame that starts
 *   4-byte aligned has aligned floats; the transport guarantees that).
 * - The header sequence number belongs to the link (reliable layer); the
 *   application's identifiers (push sequence, pull request id) are in the
 *   bodies.
 * - Ops ESD_OP_LINK_* are used by the transport itself and never reach an
 *   application through esd_link_recv().
 */
#ifndef ESD_PROTO_H
#define ESD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_PROTO_MAGIC    UINT32_C(0x46445345) /* "ESDF" on the wire */
#define ESD_PROTO_VERSION  3u
#define ESD_FRAME_HDR_SIZE 24u

/* Defaults of struct esd_proto_limits (a frame of 64 rows of 512 floats with
 * Adam state is 64 * (16 + 3 * 2048) + 40 bytes = 394 KiB). */
#define ESD_PROTO_DEFAULT_MAX_BODY (16u << 20)
#define ESD_PROTO_DEFAULT_MAX_ROWS 65536u
#define ESD_PROTO_DEFAULT_MAX_DIM  65536u
/* Longest ERROR text and most STATS entries a frame may carry. */
#define ESD_PROTO_MAX_ERROR_TEXT 1024u
#define ESD_PROTO_MAX_STATS      16u
/* Longest key and value of a SETTING (bytes, no NUL): room for
 * workers.rates, one decimal bit rate per worker. */
#define ESD_PROTO_MAX_SETTING 1024u
/* The reserved table id of the dense parameters (the reference model's
 * MLP): rows ESD_DENSE_TABLE:i, i < ceil(P / dim), live on shard 0 and
 * travel in full every iteration as transfer kind other. No embedding
 * table has this id. */
#define ESD_DENSE_TABLE 0xffffu

enum esd_op {
	ESD_OP_HELLO = 1,      /* both ways: version, worker id, job token */
	ESD_OP_PULL = 2,       /* worker -> PS: keys to pull for an iteration */
	ESD_OP_PULL_RESP = 3,  /* PS -> worker: rows (key, clock, value, state) */
	ESD_OP_PUSH_VALUE = 4, /* worker -> PS: rows' value + optimizer state */
	ESD_OP_PUSH_GRAD = 5,  /* worker -> PS: rows' partial gradients */
	ESD_OP_BARRIER = 6,    /* both ways: end of the push phase of an iteration */
	ESD_OP_ACK = 7,        /* both ways: a request was applied (or not) */
	ESD_OP_ERROR = 8,      /* both ways: code + text; a protocol error closes */
	ESD_OP_STATS = 9,      /* empty = request; else per-kind counters */
	ESD_OP_SETTING = 10,   /* PS shard 0 -> worker: a setting changes at an iteration */
	ESD_OP_ROLLBACK = 11,  /* worker -> PS: go back to checkpoint c (another shard restarted) */
	ESD_OP_ORDER = 12,     /* decider -> shard 0 -> worker: one worker's part of a decision */
	ESD_OP_APP_MAX = 12,
	/* Link-internal ops (reliable layer, shutdown); never delivered. */
	ESD_OP_LINK_ACK = 32, /* cumulative acknowledgement: u64 last in-order seq */
	ESD_OP_LINK_BYE = 33, /* orderly shutdown: u32 phase (0 bye, 1 bye-ack) */
	ESD_OP_LINK_AUTH = 34, /* job key handshake: u32 step, u32 version, 2 x 32 bytes */
	ESD_OP_LINK_HEARTBEAT = 35, /* a link idle for heartbeat_ns: u64 beat, u32 flags, u32 0 */
};

/* Header flags. Unknown bits are a protocol error. */
#define ESD_FLAG_RELIABLE   0x0001u /* seq is a reliable-layer sequence number */
#define ESD_FLAG_RETRANSMIT 0x0002u /* a retransmission (diagnostic); on a LINK_ACK:
				     * the frame acknowledged up to came as one */
#define ESD_FLAG_REPLY      0x0004u /* STATS / HELLO: this is the answer */
#define ESD_FLAG_CHECKPOINT 0x0008u /* BARRIER: the worker flushed its DIRTY rows
				     * after the previous iteration: the shard
				     * writes a checkpoint at this barrier */
#define ESD_FLAG_SETTING    0x0010u /* ACK of a BARRIER: a SETTING frame follows
				     * on this link (esd_ack.setting) */
#define ESD_FLAG_STOP       0x0020u /* BARRIER: a graceful stop of the job was asked
				     * at this node (or relayed from a shard); ACK
				     * of a BARRIER from shard 0: the job stops at
				     * the checkpoint boundary in esd_ack.sequence;
				     * from another shard: a stop was asked there */
#define ESD_FLAG_FINAL      0x0040u /* BARRIER: the worker's last one (the end of
				     * training or a stop): it leaves after the ACK */
#define ESD_FLAG_TAGGED     0x0080u /* a link with a job key: the body ends in a
				     * 16-byte tag (esd/auth.h); the link checks
				     * and strips it before anyone decodes */
#define ESD_FLAG_MASK       0x00ffu

struct esd_frame_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t op;
	uint16_t flags;
	uint32_t length; /* body bytes after the header */
	uint32_t rsvd;   /* zero */
	uint64_t seq;    /* link sequence number (0 when unused) */
};

/* What a decoder accepts. Zero fields take the defaults above. */
struct esd_proto_limits {
	uint32_t max_body; /* bytes of body; must be a multiple of 4 */
	uint32_t max_rows; /* rows or keys per frame */
	uint32_t max_dim;  /* floats per row value (and per optimizer state) */
	/* model.dims (docs/design.md §6): a row of table t carries
	 * table_dims[t] floats in the row ops flagged ESD_ROWS_TABLE_DIMS,
	 * which a receiver with table_dims requires and one without refuses;
	 * NULL: every row has the frame's dim. Borrowed, ntables entries. */
	const uint32_t *table_dims;
	uint32_t ntables;
};

/* ---- growable output buffer -------------------------------------------- */

struct esd_buf {
	uint8_t *data; /* owned; esd_buf_free() releases it */
	size_t len;
	size_t cap;
};

void esd_buf_init(struct esd_buf *b);
/* Drop the contents, keep the memory. */
void esd_buf_reset(struct esd_buf *b);
/* Release the memory; accepts NULL. */
void esd_buf_free(struct esd_buf *b);
/* Make room for n more bytes. Returns 0 or -ENOMEM (-EOVERFLOW for sizes
 * that do not fit a size_t). */
int esd_buf_reserve(struct esd_buf *b, size_t n);

/* ---- message bodies (decoded views and encoder inputs) ------------------ */

struct esd_hello {
	uint32_t proto_version; /* ESD_PROTO_VERSION of the sender */
	uint32_t worker;        /* worker rank (client) or shard id (server) */
	uint64_t job_token;     /* both ends must agree; the PS refuses others */
	uint32_t shard;         /* shard the client believes it reaches */
	uint32_t dim;           /* floats per row value */
	uint32_t state_dim;     /* floats of optimizer state per row */
	uint32_t nworkers;      /* workers in the job (0 = unknown) */
	uint64_t stream_digest; /* esd_ds_digest of data.stream (0 = none) */
};

struct esd_pull {
	uint64_t iteration;
	uint64_t request; /* echoed in PULL_RESP.sequence */
	uint32_t worker;
	uint32_t count;
	uint32_t kind;    /* MISS_PULL, or OTHER (dense table, recovery); echoed */
	const uint8_t *keys; /* count little-endian u64; read with esd_msg_key() */
};

/* Row op body flag (the body's flags field): each row carries its table's
 * dim (esd_rows_key_dim), not the frame's. */
#define ESD_ROWS_TABLE_DIMS 0x1u

/* Header of the row ops. For PULL_RESP, sequence echoes the PULL request and
 * kind echoes the PULL's (MISS_PULL or OTHER); PUSH_VALUE has kind
 * UPDATE_PUSH, EVICT_PUSH or OTHER (checkpoint flush); PUSH_GRAD has kind
 * UPDATE_PUSH or OTHER (the dense table) and state_dim 0. Accounting uses
 * the body's kind. */
struct esd_rows {
	uint64_t iteration;
	uint64_t sequence; /* push: per-worker push sequence (exactly-once id) */
	uint32_t worker;
	uint32_t kind; /* enum esd_xfer_kind */
	uint32_t count;
	uint32_t dim;        /* floats per row value; with table_dims the largest */
	uint32_t state_dim;  /* floats of optimizer state of a dim-float row */
	/* model.dims: a row of table t carries table_dims[t] value floats and
	 * state_dim / dim state floats per value float (ESD_ROWS_TABLE_DIMS on
	 * the wire); the dense table and every row without it: dim. Encoder:
	 * set to pack; decoded: the limits' when the frame is flagged. */
	const uint32_t *table_dims;
	uint32_t ntables;
	const uint8_t *data; /* decoded: first row in the frame */
	size_t stride;       /* bytes of a dim-float row: 16 + 4 * (dim + state_dim) */
};

/* One row of a row op: value and state point into the frame. */
struct esd_row_view {
	esd_key_t key;
	uint64_t clock; /* row clock (PULL_RESP, PUSH_VALUE) or the clock the
	                 * gradient was computed against (PUSH_GRAD) */
	const float *value; /* dim floats */
	const float *state; /* state_len floats; NULL when there are none */
	uint32_t dim, state_len;
};

struct esd_barrier {
	uint64_t iteration;
	uint64_t digest; /* digest of the dispatch decision (0 = none) */
	uint32_t worker;
	uint32_t npushes; /* push frames the worker sent this shard since its previous
			   * barrier (or its HELLO or ROLLBACK); the shard checks it */
	int checkpoint;   /* header flag ESD_FLAG_CHECKPOINT (not in the body) */
	int stop;         /* header flag ESD_FLAG_STOP */
	int final;        /* header flag ESD_FLAG_FINAL */
};

/* ROLLBACK: after another shard restarted from checkpoint c, every shard
 * of the job reloads its own checkpoint c. ACK status 0, or -ESTALE with
 * sequence = the shard's newest checkpoint when it has no checkpoint c. */
struct esd_rollback {
	uint64_t iteration;
	uint32_t worker;
};

struct esd_ack {
	uint64_t iteration;
	uint64_t sequence; /* push sequence, or 0 for a barrier */
	uint32_t op;       /* the op acknowledged */
	int32_t status;    /* 0 or -errno / -ESD_E* */
	int setting;       /* header flag ESD_FLAG_SETTING: a SETTING frame follows */
	int stop;          /* header flag ESD_FLAG_STOP */
};

/* A live setting change (esdctl set): from iteration 'iteration' on, the
 * setting 'key' has 'value'. Key and value are 1..ESD_PROTO_MAX_SETTING
 * bytes without NUL, not NUL-terminated, pointing into the frame; what
 * keys exist and what values mean is the application's business. */
struct esd_setting {
	uint64_t iteration;
	uint32_t key_len, value_len;
	const char *key, *value;
};

/* ORDER: worker 'worker''s part of the decision of iteration 'iteration',
 * made by the job's one decider and relayed by shard 0 (docs/protocol.md,
 * ORDER). The lists are keys ascending, read with esd_order_key(). */
#define ESD_ORDER_CHECKPOINT 0x1u /* a checkpoint boundary */
#define ESD_ORDER_FLUSH      0x2u /* the end of training: every DIRTY row pushed */
#define ESD_ORDER_AHEAD      0x4u /* lookahead hints from the next batch's keys */
#define ESD_ORDER_RATE       0x8u /* rate_bps: this worker's links' new rate */
#define ESD_ORDER_FLAGS      0xfu
#define ESD_ORDER_MAX_K      (1u << 20) /* samples of one decision */
#define ESD_ORDER_NLISTS     3 /* update pushes, miss pulls, DIRTY evictions */
struct esd_order_msg {
	uint64_t iteration;
	uint64_t digest;     /* of the whole decision (as in BARRIER) */
	uint32_t worker;     /* the worker the order is for */
	uint32_t flags;      /* ESD_ORDER_* */
	int32_t policy;      /* the cache policy from this iteration on, -1: unchanged */
	uint32_t k;          /* samples of the batch */
	uint64_t rate_bps;   /* with ESD_ORDER_RATE */
	uint64_t pred_rows[4]; /* rows per transfer kind (enum esd_xfer_kind) */
	uint64_t pred_bytes[4]; /* those rows' bytes (model.dims: per table) */
	uint32_t count[ESD_ORDER_NLISTS]; /* keys of each list */
	const uint8_t *assign; /* [k]: the worker of each sample */
	const uint8_t *keys[ESD_ORDER_NLISTS]; /* into the frame */
};

struct esd_error {
	int32_t code; /* -errno or -ESD_E* */
	uint32_t len;
	const char *text; /* len bytes, not NUL-terminated; into the frame */
};

/* Per-kind counters as carried by STATS. */
struct esd_stats_entry {
	uint32_t kind; /* enum esd_xfer_kind */
	uint64_t tx_bytes, tx_rows, rx_bytes, rx_rows;
};

struct esd_stats_msg {
	uint32_t count;      /* 0: a request */
	const uint8_t *data; /* entries; read with esd_stats_get() */
};

/* LINK_AUTH (transport/auth.c): step 1 client hello (a = client nonce,
 * suites = the tag ciphers it can run), 2 challenge (a = server nonce, b =
 * server's proof, suites = the one chosen), 3 proof (b = client's proof);
 * unused fields are zero. */
#define ESD_LINK_AUTH_VERSION 1u
#define ESD_LINK_AUTH_FIELD   32u
#define ESD_LINK_AUTH_BODY    (16u + 2u * ESD_LINK_AUTH_FIELD)
#define ESD_SUITE_CHACHA20_POLY1305 0x1u /* every build */
#define ESD_SUITE_AES256_GCM        0x2u /* where the CPU has AES-NI and CLMUL */
#define ESD_SUITE_NH_GMAC           0x4u /* AES-NI, AVX2 and VPCLMULQDQ (gmac.h) */
/* LINK_HEARTBEAT (transport/heartbeat.c): beat counts the heartbeats this
 * side sent on the link (from 1). With ESD_BEAT_ASIDE the heartbeat travels
 * beside the link's ordered stream of frames (below the reliable layer, or
 * over rdma's bootstrap socket): on a keyed link its tag is made under the
 * heartbeat's own counter (beat), not the link's frame counter. */
#define ESD_LINK_HEARTBEAT_BODY 16u
#define ESD_BEAT_ASIDE          0x1u
struct esd_link_heartbeat {
	uint64_t beat;
	uint32_t flags;
};

struct esd_link_auth {
	uint32_t step;
	uint32_t suites;
	const uint8_t *a, *b; /* ESD_LINK_AUTH_FIELD bytes each, into the frame */
};

/* A decoded frame. Views point into the decoded buffer. */
struct esd_msg {
	struct esd_frame_hdr hdr;
	union {
		struct esd_hello hello;
		struct esd_pull pull;
		struct esd_rows rows; /* PULL_RESP, PUSH_VALUE, PUSH_GRAD */
		struct esd_barrier barrier;
		struct esd_ack ack;
		struct esd_error error;
		struct esd_stats_msg stats;
		struct esd_setting setting;
		struct esd_rollback rollback;
		struct esd_order_msg order;
		uint64_t link_ack; /* ESD_OP_LINK_ACK */
		uint32_t link_bye; /* ESD_OP_LINK_BYE */
		struct esd_link_auth link_auth; /* ESD_OP_LINK_AUTH */
		struct esd_link_heartbeat link_heartbeat; /* ESD_OP_LINK_HEARTBEAT */
	} u;
};

/* ---- decoding ----------------------------------------------------------- */

/* Name of an op ("PULL", ...) or "op?" for an unknown one; static. */
const char *esd_op_name(unsigned op);

/*
 * Parse and check a frame header from the first ESD_FRAME_HDR_SIZE bytes of
 * p (avail bytes are available). Checks magic, version, op (known), flags
 * (known bits), rsvd (zero), length (multiple of 4, at most lim->max_body).
 * On error, err (if not NULL) receives a sentence naming the field and value.
 * Returns 0, -EAGAIN (fewer than ESD_FRAME_HDR_SIZE bytes), -ESD_EBADMAGIC,
 * -ESD_EBADVERSION, -EPROTO (unknown op, flags, rsvd, misaligned length) or
 * -EMSGSIZE (length above the maximum).
 */
int esd_frame_hdr_parse(const void *p, size_t avail, const struct esd_proto_limits *lim,
                        struct esd_frame_hdr *out, char *err, size_t errlen);

/*
 * Decode one whole frame of len bytes (header + body; len must equal
 * ESD_FRAME_HDR_SIZE + hdr.length). Checks the header as above and the body
 * of its op: fixed sizes, counts and dimensions against the limits and
 * against the body length (exact match, no trailing bytes), kinds, padding.
 * Returns 0 with *out filled, or the errors of esd_frame_hdr_parse(), or
 * -EPROTO (a body that does not match its op) or -E2BIG (a count or
 * dimension above the limits), with err filled.
 */
int esd_proto_decode(const void *frame, size_t len, const struct esd_proto_limits *lim,
                     struct esd_msg *out, char *err, size_t errlen);

/* Key i of a decoded PULL (i < count, unchecked). */
esd_key_t esd_msg_key(const struct esd_msg *m, uint32_t i);
/* Key i of list l of a decoded ORDER (i < count[l], unchecked). */
esd_key_t esd_order_key(const struct esd_order_msg *o, int l, uint32_t i);
/* Row i of a decoded row op of fixed stride (no table_dims; i < count,
 * unchecked). */
void esd_rows_get(const struct esd_rows *r, uint32_t i, struct esd_row_view *out);
/* The row at p of a decoded row op (p = r->data for the first), any
 * frame; returns where the next one starts. */
const uint8_t *esd_rows_next(const struct esd_rows *r, const uint8_t *p,
			     struct esd_row_view *out);
/* Value floats of key's rows in r: its table's dim with table_dims, else
 * r->dim. */
static inline uint32_t esd_rows_key_dim(const struct esd_rows *r, esd_key_t key)
{
	uint32_t t = esd_key_table(key);
	return r->table_dims && t < r->ntables ? r->table_dims[t] : r->dim;
}
/* A row view into a row of dim floats with state_dim floats of state
 * (the cache's and the store's shape): value[0, v->dim) and each
 * optimizer state block likewise, the rest of each zeroed; state may be
 * NULL. */
void esd_row_view_unpack(const struct esd_row_view *v, uint32_t dim, uint32_t state_dim,
			 float *value, float *state);
/* Entry i of a decoded STATS (i < count, unchecked). */
void esd_stats_get(const struct esd_stats_msg *s, uint32_t i, struct esd_stats_entry *out);

/*
 * Transfer kind and rows of a whole encoded frame, for accounting: PULL is
 * its body's kind with 0 rows (the request), the row ops their body's kind
 * with count rows, everything else ESD_XFER_OTHER with 0 rows. The frame must already have been checked
 * (own encoding, or esd_frame_hdr_parse()); a too-short body counts as
 * OTHER.
 */
void esd_proto_classify(const void *frame, size_t len, enum esd_xfer_kind *kind, uint32_t *rows);

/* ---- encoding ----------------------------------------------------------- */
/* Every encoder appends one whole frame to b and returns 0, -ENOMEM, or
 * -EINVAL for arguments that would make a frame the decoder refuses with
 * default limits (a count above ESD_PROTO_DEFAULT_MAX_ROWS, a text too long,
 * a bad kind). The header's seq is 0 (the link fills it). */

int esd_enc_hello(struct esd_buf *b, const struct esd_hello *h, uint16_t flags);
int esd_enc_pull(struct esd_buf *b, uint64_t iteration, uint64_t request, uint32_t worker,
		 const esd_key_t *keys, uint32_t count);
/* The same with the transfer kind the pull is accounted as (MISS_PULL or
 * OTHER); the shard answers with that kind. */
int esd_enc_pull_kind(struct esd_buf *b, uint64_t iteration, uint64_t request, uint32_t worker,
		      enum esd_xfer_kind kind, const esd_key_t *keys, uint32_t count);
int esd_enc_barrier(struct esd_buf *b, const struct esd_barrier *br);
int esd_enc_rollback(struct esd_buf *b, uint64_t iteration, uint32_t worker);
int esd_enc_ack(struct esd_buf *b, const struct esd_ack *a);
/* text may be NULL; it is cut at ESD_PROTO_MAX_ERROR_TEXT bytes. */
int esd_enc_error(struct esd_buf *b, int32_t code, const char *text);
/* count 0 encodes a request. */
int esd_enc_stats(struct esd_buf *b, const struct esd_stats_entry *e, uint32_t count,
                  uint16_t flags);
/* A SETTING: key and value are NUL-terminated strings of 1 to
 * ESD_PROTO_MAX_SETTING bytes (-EINVAL otherwise). */
int esd_enc_setting(struct esd_buf *b, uint64_t iteration, const char *key, const char *value);
/* An ORDER: o's fields but the pointers; assign has o->k entries (each
 * below ESD_MAX_WORKERS), lists[l] o->count[l] keys. -EINVAL for a k
 * above ESD_ORDER_MAX_K, a count above ESD_PROTO_DEFAULT_MAX_ROWS,
 * unknown flags or a worker number out of range. */
int esd_enc_order(struct esd_buf *b, const struct esd_order_msg *o, const uint32_t *assign,
		  const esd_key_t *const lists[ESD_ORDER_NLISTS]);
/* The same from a decoded ORDER (its assign and keys point into a frame
 * that passed the decoder): shard 0 relays it. */
int esd_enc_order_copy(struct esd_buf *b, const struct esd_order_msg *o);
/* Link-internal frames (used by transport/). */
int esd_enc_link_ack(struct esd_buf *b, uint64_t seq);
int esd_enc_link_bye(struct esd_buf *b, uint32_t phase);
int esd_enc_link_heartbeat(struct esd_buf *b, uint64_t beat, uint32_t flags);
int esd_enc_link_auth(struct esd_buf *b, uint32_t step, uint32_t suites, const uint8_t *a,
		      const uint8_t *bb);

/* Builder of a row op. Fill op and the header fields of r (count is kept by
 * the builder), call esd_enc_rows_begin(), then esd_enc_row() or
 * esd_enc_row_reserve() per row, then esd_enc_rows_end(). Another frame may
 * not be appended to the same buffer between begin and end. */
struct esd_rows_enc {
	struct esd_buf *b;
	size_t start; /* offset of the frame header in b */
	size_t ext;   /* body bytes that stay outside b (esd_enc_row_ref) */
	uint8_t op;
	struct esd_rows r;
};

/* Returns 0, -ENOMEM or -EINVAL (op is not a row op, kind does not fit the
 * op, PUSH_GRAD with state, dim 0 or above the default maximum). */
int esd_enc_rows_begin(struct esd_rows_enc *e, struct esd_buf *b, enum esd_op op,
                       const struct esd_rows *r);
/* Append one row; value has dim floats, state state_dim floats (NULL when
 * state_dim is 0); with table_dims the row carries the first d of value
 * and of each of state's blocks of dim floats, d its table's dim. Returns 0, -ENOMEM, or -E2BIG past the row or body
 * maximum. */
int esd_enc_row(struct esd_rows_enc *e, esd_key_t key, uint64_t clock, const float *value,
                const float *state);
/* Append one row and return where its value (and state) floats go: d and
 * d * state_dim / dim of them, d = esd_rows_key_dim(); the pointers are
 * valid until the next append to the buffer. */
int esd_enc_row_reserve(struct esd_rows_enc *e, esd_key_t key, uint64_t clock, float **value,
                        float **state);
/* Body bytes of the open frame so far. */
size_t esd_enc_rows_body(const struct esd_rows_enc *e);
/* Bytes one row of key takes in the open frame. */
size_t esd_enc_row_size(const struct esd_rows_enc *e, esd_key_t key);
/* Patch count and length into the frame. Returns 0. */
int esd_enc_rows_end(struct esd_rows_enc *e);

/*
 * Frames whose row floats stay where they lie (zero copy): a gather list
 * over a buffer b and the caller's memory. esd_enc_row_ref() writes a
 * row's key and clock into b and records value and state in place; every
 * other byte (headers, other encoders' frames appended to b meanwhile) is
 * b's. esd_gather_iov() then gives the pieces in order, for
 * esd_link_sendv(). The referenced floats must stay unchanged until that
 * send returns. Reset g together with b.
 */
struct esd_gather_span {
	const void *ext; /* NULL: bytes [off, off + len) of b */
	size_t off, len;
};
struct esd_gather {
	struct esd_gather_span *v;
	size_t n, cap;
	size_t mark;     /* b's bytes before mark are covered by spans */
	size_t ext;      /* bytes in ext spans */
	void *iov;       /* esd_gather_iov()'s array (struct iovec) */
	size_t iov_cap;
};

void esd_gather_init(struct esd_gather *g);
void esd_gather_reset(struct esd_gather *g);
void esd_gather_free(struct esd_gather *g);
/* As esd_enc_row(), the floats sent from value and state in place (state
 * NULL with a state_dim: zeros, copied). Returns as esd_enc_row(). */
int esd_enc_row_ref(struct esd_rows_enc *e, struct esd_gather *g, esd_key_t key,
                    uint64_t clock, const float *value, const float *state);
/* The pieces of b and g in order as an array of struct iovec in *iov (g's
 * storage, valid until the next call or reset) and their count in *n.
 * Returns 0 or -ENOMEM. */
int esd_gather_iov(struct esd_gather *g, const struct esd_buf *b, void **iov, int *n);

/* Bytes of a row op frame with count rows (for sizing batches). */
static inline size_t esd_rows_frame_size(uint32_t count, uint32_t dim, uint32_t state_dim)
{
	return ESD_FRAME_HDR_SIZE + 40u +
	       (size_t)count * (16u + 4u * ((size_t)dim + (size_t)state_dim));
}

#ifdef __cplusplus
}
#endif
#endif /* ESD_PROTO_H */
