/*
 * Private interface between the link layer (link.c on top, then rel.c,
 * shaper.c, fault.c, and wire.c at the bottom) and the backends (tcp.c,
 * dpdk.c, rdma.c). Each file calls only the ones below it. Not installed.
 *
 * A backend moves whole frames: send() writes a batch of frames, recv()
 * returns the next whole frame whose header it checked with
 * esd_frame_hdr_parse() against w->lim before allocating its body. The
 * frame returned by recv() stays valid until the next recv() or close().
 */
#ifndef ESD_TRANSPORT_LINK_INTERNAL_H
#define ESD_TRANSPORT_LINK_INTERNAL_H

#include <esd/transport.h>

#include "gmac.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define WIRE_ERR_LEN 256

/* ---- buffer cache (bufcache.c) -------------------------------------------- */

/* Frame-sized blocks are above malloc's mmap threshold: allocating and
 * freeing one per frame costs page faults on every byte. A link keeps a few
 * freed blocks for reuse. Single-threaded (the link's thread). */
#define BUFCACHE_SLOTS 64

struct bufcache {
	void *blk[BUFCACHE_SLOTS];
	size_t cap[BUFCACHE_SLOTS];
	unsigned n;
};

/* A block of at least size bytes (its capacity in *cap), or NULL. */
void *esd_bufcache_get(struct bufcache *c, size_t size, size_t *cap);
/* Give a block back (freed if the cache is full). Accepts NULL. */
void esd_bufcache_put(struct bufcache *c, void *blk, size_t cap);
void esd_bufcache_fini(struct bufcache *c);

/* A frame in a block of its own, as the reliable layer queues it and the
 * dpdk backend reassembles it: one layout, so a frame can change hands
 * without a copy (wire_ops.take). data is 16-byte aligned. */
struct fbuf {
	struct fbuf *next;
	uint64_t seq;
	size_t len, cap;
	int64_t first_ns, sent_ns;
	/* hashed: the wire hashed the frame's bytes before its tag as it
	 * took them (esd_wire_rx_hash_start), into run */
	bool hashed;
	struct gmac_run run;
	uint8_t data[];
};

/* A block for a len-byte frame from the cache (len and cap set), or NULL. */
struct fbuf *esd_fbuf_get(struct bufcache *c, size_t len);
/* Back to the cache; accepts NULL. */
void esd_fbuf_put(struct bufcache *c, struct fbuf *b);


/* ---- memory to send from in place (memreg.c) ---------------------------- */

struct memreg_region {
	const void *base;
	size_t len;
};

/* Changes whenever a region comes or goes. */
uint64_t esd_memreg_generation(void);
/* The regions now (at most ESD_TRANSPORT_MAX_REGIONS) and the generation
 * they are of. */
unsigned esd_memreg_snapshot(struct memreg_region *out, uint64_t *gen);

/* ---- SEND lists from frames in pieces (gather_plan.c) ------------------- */

#define PLAN_MAX_ENTRIES 16

struct plan_region {
	const void *base;
	size_t len;
	uint32_t key; /* the device's key of its registration */
};

struct plan_entry {
	uint64_t addr;
	uint32_t len, key;
	bool staged; /* a copy in the chunk's staging area */
};

/* One SEND: entries in order, len bytes, staged of them copied. */
struct esd_gather_plan_chunk {
	struct plan_entry e[PLAN_MAX_ENTRIES];
	int n;
	size_t len, staged;
	unsigned in_place; /* entries sent in place */
};

struct plan_rules {
	const struct plan_region *reg; /* memory sent from in place */
	unsigned nreg;
	int max_entries;     /* 1 to PLAN_MAX_ENTRIES */
	size_t min_in_place; /* shorter pieces are copied */
	size_t chunk_max;    /* a chunk's bytes at most (the receive slot) */
	uint32_t stage_key;  /* key of the staging areas' registration */
};

/* Where a send is in its pieces. */
struct plan_cursor {
	const struct iovec *iov;
	int n, i;
	size_t off;
};

/* Fill c with up to max bytes of the cursor's (copies into stage, which
 * holds max bytes). */
void esd_gather_plan_chunk(const struct plan_rules *r, struct plan_cursor *cur, uint8_t *stage,
                           size_t max, struct esd_gather_plan_chunk *c);

struct plan_ops {
	int (*stage)(void *ctx, uint8_t **stage); /* a free staging area */
	int (*emit)(void *ctx, struct esd_gather_plan_chunk *c); /* send c (staged in it) */
};
/* Cut the whole frames of iov[0..n) (each header within one piece) into
 * chunks, each frame's its own; *in_place counts the entries sent in place.
 * 0, -EINVAL (not whole frames), or the ops' errors. */
int esd_gather_plan_send(const struct plan_rules *r, const struct iovec *iov, int n,
                         const struct plan_ops *ops, void *ctx, size_t *in_place);

/* Common head of every backend's link object. */
struct wire {
	const struct wire_ops *ops;
	struct esd_proto_limits lim;
	int64_t timeout_ns;
	size_t rx_backlog_max;
	/* Packets may be lost, duplicated or reordered below the frames (dpdk
	 * over af_packet or a NIC): the reliable layer is always on. Else the
	 * backend delivers every frame once and in order or fails the link. */
	bool lossy;
	char err[WIRE_ERR_LEN];
	char peer[300];
	struct bufcache cache; /* frame blocks of this link (all layers) */
	/* Held (recursively) by whatever puts bytes on the wire: the
	 * application's sends, the layers' own frames (acks, a LINK_BYE
	 * answer) and the heartbeat thread, which only tries it. */
	pthread_mutex_t tx_mu;
	/* esd_now_ns() of the last bytes the backend took from the peer
	 * (part of a frame counts), for the peer timeout. */
	_Atomic int64_t rx_ns;
	/* A keyed link once its handshake is done (auth.c sets it, on the
	 * receiving thread): the receiving direction's GMAC key. A backend
	 * that reassembles frames hashes each tagged one as it copies it in
	 * (esd_wire_rx_hash_start, esd_wire_rx_take; tcp as its bytes land,
	 * esd_wire_rx_run_start), and its recv() points rx_run at the hash of
	 * the frame it returns (rx_run_frame), else NULL. */
	const struct gmac *rx_mac;
	const struct gmac_run *rx_run;
	const uint8_t *rx_run_frame;
};

struct wire_listener {
	const struct wire_ops *ops;
	char addr[256];
	char err[WIRE_ERR_LEN];
};

struct wire_ops {
	const char *name;
	/* NULL when built; else "not built: <reason>". */
	const char *not_built;
	int (*connect)(const struct esd_link_opts *o, struct wire **out);
	int (*listen)(const struct esd_link_opts *o, struct wire_listener **out);
	int (*accept)(struct wire_listener *l, const struct esd_link_opts *o, int64_t deadline_ns,
	              struct wire **out);
	void (*listener_close)(struct wire_listener *l);
	/* n whole frames; all of them written (or queued in order) on return. */
	int (*send)(struct wire *w, const struct iovec *iov, int n, int64_t deadline_ns);
	/* Optional: n pieces that in order are whole frames (each frame's
	 * header within one piece), sent from where they lie; the memory may
	 * change once it returns. */
	int (*sendv)(struct wire *w, const struct iovec *iov, int n, int64_t deadline_ns);
	/* Next whole frame, or -ETIMEDOUT at deadline_ns (< 0: none). */
	int (*recv)(struct wire *w, const uint8_t **frame, size_t *len, int64_t deadline_ns);
	/* Orderly shutdown within deadline_ns, then free (w->cache too). */
	void (*close)(struct wire *w, int64_t deadline_ns);
	/* Optional: hand over the block of the frame the last recv() returned
	 * (NULL if it is not in a block of its own); the caller then owns it
	 * and gives it back with esd_fbuf_put(&w->cache, ...). */
	struct fbuf *(*take)(struct wire *w);
	/* Optional: esd_transport_probe (NULL: nothing to check). */
	int (*probe)(const struct esd_link_opts *o);
	/* A heartbeat frame, from the heartbeat thread while the link's own
	 * thread may be receiving (tx_mu held): sent whole without waiting,
	 * or -EAGAIN with nothing sent (no room now), or another -errno. */
	int (*beat)(struct wire *w, const uint8_t *frame, size_t len);
	/* beat() sends beside the stream of frames (not in their order). */
	bool beat_aside;
	/* Optional: end the link from any thread, its socket shut both ways
	 * (a receive in progress returns soon); NULL: link.c's receive
	 * notices at its next deadline. */
	void (*abort)(struct wire *w);
};

extern const struct wire_ops esd_wire_tcp;
extern const struct wire_ops esd_wire_dpdk;
extern const struct wire_ops esd_wire_rdma;

/* ---- the wire's helpers (wire.c), for every layer and backend ---------- */

/* Record an error on a wire (and return rc). */
__attribute__((format(printf, 3, 4))) int esd_wire_fail(struct wire *w, int rc, const char *fmt, ...);
/* Fill a wire head from options. */
void esd_wire_init(struct wire *w, const struct wire_ops *ops, const struct esd_link_opts *o);
/* Note bytes taken from the peer now (w->rx_ns). */
void esd_wire_heard(struct wire *w);
/* A frame of b->len bytes whose header is hdr starts into b: b->hashed
 * when the wire has rx_mac and the frame is tagged, its hash started with
 * the header as its tag covers it. The header is not copied. */
void esd_wire_rx_hash_start(struct wire *w, struct fbuf *b, const uint8_t *hdr);
/* The same for a frame of len bytes hashed into r (a backend that keeps
 * frames where they land, tcp): true when hashing starts. */
bool esd_wire_rx_run_start(const struct wire *w, struct gmac_run *r, const uint8_t *hdr,
                           size_t len);
/* len bytes of the frame at offset off (past its header) copied from src
 * into b (src may be b's own bytes there), those before the tag hashed in
 * the same pass when b->hashed. */
void esd_wire_rx_take(struct wire *w, struct fbuf *b, size_t off, const uint8_t *src, size_t len);
/* Absolute deadline from a relative timeout (< 0: none, -1). */
int64_t esd_deadline_after(int64_t timeout_ns);

/* ---- token bucket (shaper.c) ------------------------------------------- */

struct shaper {
	_Atomic uint64_t rate_bps; /* written by any thread */
	uint64_t burst_bytes;      /* 0: derived from the rate */
	uint64_t seen_rate;        /* rate the virtual clock was computed for */
	int64_t tat_ns;            /* theoretical arrival time of the next byte */
};

void esd_shaper_init(struct shaper *s, uint64_t rate_bps, uint64_t burst_bytes);

/* The bucket a link's sends draw from: its uplink's, else its own. */
struct shaper *esd_link_shaper(struct esd_link *l);
/* Shape bytes about to go on the wire on the link's bucket; the wait and the bytes
 * counted in the link's stats. */
void esd_link_shape_tx(struct esd_link *l, size_t bytes);

/* ---- fault injection (fault.c) ----------------------------------------- */

struct fault {
	struct esd_fault_opts o;
	uint64_t rng;
	int on;
	uint8_t *held; /* a frame held back for reordering */
	size_t held_len;
	int64_t held_since;
};

void esd_fault_init(struct fault *f, const struct esd_fault_opts *o);
void esd_fault_fini(struct fault *f);

/* ---- job key handshake and frame tags (auth.c) ------------------------- */

#define AUTH_TAG_BYTES 16
/* esd_link_send seals a batch in pieces of about this many bytes and
 * sends each before sealing the next: the sealed copy stays small, and
 * the peer checks one piece while the next is sealed. */
#define AUTH_SEAL_MAX_BYTES (256u << 10)

enum auth_state {
	AUTH_CLIENT_WAIT, /* client: sent its hello, waits for the challenge */
	AUTH_SERVER_WAIT, /* server: waits for the client's hello */
	AUTH_SERVER_PROOF, /* server: sent the challenge, waits for the proof */
	AUTH_OPEN,         /* both proved the key: every frame is tagged */
};

struct link_auth {
	uint8_t key[32];
	enum auth_state state;
	uint8_t nc[32], ns[32];     /* client's and server's nonces */
	uint32_t offer, suite;      /* the client's tag ciphers, the one chosen */
	uint8_t ktx[32], krx[32];   /* this link's keys, one per direction */
	uint64_t tx_ctr, rx_ctr;    /* frames tagged / checked so far */
	uint64_t rx_beat;           /* the last heartbeat sent aside, checked */
	struct esd_buf sealed;      /* a batch of frames with their tags */
	bool wide;                  /* AES-256-GCM tags by gmac.c, not libsodium */
	struct gmac gtx, grx;       /* ktx's and krx's expanded keys (wide) */
};

struct esd_link;
/* Give l a copy of key and the handshake's state for its side (client or
 * server); its frames may now be a tag longer. 0, -ENOMEM, -EIO. */
int esd_auth_create(struct esd_link *l, const struct esd_key *key, int client);
/* The link's handshake as a client (from esd_link_connect), within deadline:
 * 0, -EACCES (the peer refused, or does not hold the key), -EAGAIN (the
 * peer is busy: its refusal said so), or the link's errors. */
int esd_auth_client(struct esd_link *l, int64_t deadline_ns);
/*
 * A received frame on a keyed link, before decoding: a handshake frame is
 * handled (1: consumed); a tagged frame is checked and its tag stripped in
 * place (*len shrinks; 0); an untagged ERROR passes (0) once the link is
 * open (the refusal of our proof), and ends it before; anything else is
 * -EACCES with l->err set.
 */
int esd_auth_rx(struct esd_link *l, uint8_t *frame, size_t *len);
/* The frames iov[0..n) with their tags appended, in l's buffer: iov is
 * rewritten to point there (0, -ENOMEM). Before the handshake is done only
 * ERROR frames may be sent (untagged); others are -EACCES. */
int esd_auth_seal(struct esd_link *l, struct iovec *iov, int n);
/* Tag a heartbeat frame (cap bytes of room at frame, *len in and out):
 * in the link's frame order (aside 0: the frame counter, which
 * esd_auth_unseal_beat() takes back when the beat could not be sent) or beside
 * it (aside 1: under the heartbeat counter beat). 0, -EACCES (the
 * handshake is not done), -ENOSPC. */
int esd_auth_seal_beat(struct esd_link *l, uint8_t *frame, size_t *len, size_t cap, int aside,
                       uint64_t beat);
void esd_auth_unseal_beat(struct esd_link *l);
/* 1 when l's frames can be tagged in place: open, wide tags. */
int esd_auth_in_place_ok(const struct esd_link *l);
/* The frame at f (len bytes, its header as the encoder made it, a tag's
 * room after it) marked tagged as seal_one marks a sealed copy, and hashed
 * while the encoder's bytes are still in the cache: the hash (no nonce in
 * it) waits in the tag's room. 0, -EINVAL (too short for the wide tag). */
int esd_auth_mark_in_place(struct esd_link *l, uint8_t *f, size_t len);
/* Its tag, from that hash, under the next counter nonce, written in its
 * room (under the send lock, in send order). */
void esd_auth_finish_in_place(struct esd_link *l, uint8_t *f, size_t len);
/* A frame copied from pieces and marked on the way, each window of the
 * copy hashed while it is still in the CPU's cache: what
 * esd_auth_mark_in_place() leaves of a frame encoded at f. */
struct auth_mark {
	struct gmac_run run;
	uint8_t *f;    /* where the frame goes, a tag's room after it */
	size_t len;    /* the frame's bytes */
	size_t at;     /* copied so far */
	size_t hashed; /* hashed so far */
};
/* Start a frame of len bytes at f (room for len + AUTH_TAG_BYTES): 0, or
 * -EINVAL where it is too short for the wide tag (send it as a copy). */
int esd_auth_mark_begin(const struct esd_link *l, struct auth_mark *m, uint8_t *f, size_t len);
/* Its next n bytes, from p. */
void esd_auth_mark_add(struct esd_link *l, struct auth_mark *m, const uint8_t *p, size_t n);
/* The frame whole: its hash in the tag's room; -EINVAL where the bytes
 * added are not len. */
int esd_auth_mark_end(struct esd_link *l, struct auth_mark *m);
void esd_auth_fini(struct link_auth *a);

/* ---- before the handshake ------------------------------------------------ */

/* Until a keyed link's handshake is done, its wire takes frames of at most
 * this body (a LINK_AUTH, or an ERROR with its reason) and buffers at most
 * PRE_AUTH_BACKLOG bytes beyond the frame it is reading: a peer without
 * the key makes the process hold no more for it. */
#define PRE_AUTH_MAX_BODY 1024u
#define PRE_AUTH_BACKLOG  (4u << 10)
/* Keyed links accepted and not yet through the handshake, in the whole
 * process: a connection over it is closed at accept. */
#define PRE_AUTH_MAX_LINKS 64

/* ---- the link ----------------------------------------------------------- */

struct rel;

struct esd_link {
	struct wire *w;
	struct esd_link_opts o;
	struct shaper shaper;
	struct fault fault;
	struct rel *rel; /* NULL when the backend alone is relied on */
	struct esd_proto_limits lim; /* what the application's frames may be */
	int broken;      /* receive side lost sync, or the peer is gone */
	char err[WIRE_ERR_LEN + 64];
	struct esd_buf scratch;
	struct esd_buf flat; /* esd_link_sendv's pieces, where they are copied */
	struct link_auth *auth; /* NULL: the job has no key */
	/* counters, written by the link's thread, read by any */
	_Atomic uint64_t ks[ESD_XFER_NKINDS][6];
	_Atomic uint64_t wire_tx_bytes, retx_frames, dup_rx_frames;
	_Atomic uint64_t fault_drops, fault_dups, fault_reorders, shaped_wait_ns;
	_Atomic uint64_t in_place_bytes;
	_Atomic uint64_t auth_tx_cpu_ns, auth_rx_cpu_ns; /* CPU tagging, checking frames */
	/* heartbeats (heartbeat.c) */
	_Atomic int64_t tx_ns; /* the last bytes sent (any thread) */
	int64_t heard_ns;      /* the link's thread: the last frame taken */
	int64_t recv_end_ns;   /* the link's thread: when the last receive ended */
	uint64_t beats;        /* heartbeats sent (under tx_mu) */
	struct esd_link *hb_next; /* the heartbeat thread's list */
	bool hb_on;
	/* before the handshake (keyed links): the wire's limits and the
	 * layers that start once it is done */
	uint32_t open_max_body;
	size_t open_backlog;
	bool rel_deferred, faults_deferred;
	bool pre_auth_counted; /* in the process's count of such links */
	_Atomic bool aborted;  /* esd_link_abort() was called */
};

/* Whether l is a keyed link whose handshake is not done: then nothing but
 * the handshake runs for it (link.c, rel.c). */
static inline bool link_pre_auth(const struct esd_link *l)
{
	return l->auth && l->auth->state != AUTH_OPEN;
}

/* ---- heartbeats (heartbeat.c) ------------------------------------------ */

/* Beat on l while it is open (heartbeat_ns > 0). 0 or -errno. */
int esd_hb_add(struct esd_link *l);
/* Stop beating on l (before it closes); accepts a link never added. */
void esd_hb_remove(struct esd_link *l);
/* A receive on l timed out at deadline: -ETIMEDOUT with the link broken
 * when the peer was heard from not at all for peer_timeout_ns, else 0. */
int esd_hb_peer_silent(struct esd_link *l);
/* The deadline a receive on l waits until: deadline, or sooner when the
 * peer timeout falls before it. */
int64_t esd_hb_recv_deadline(struct esd_link *l, int64_t deadline);

/* The next frame from below (the reliable layer, or what is under it),
 * starting the reliable layer when the peer runs it. */
int esd_link_next_frame(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline_ns);
/* Send whole frames below the accounting (the reliable layer or under). */
int esd_link_send_raw(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline_ns);

/* Everything below the reliable layer: shaping, faults, backend. */
int esd_lower_send(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline_ns);
int esd_lower_recv(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline_ns);
/* Release a frame held back by the reorder fault once it is due. */
int esd_fault_flush(struct esd_link *l, int force);

/* ---- reliable layer (rel.c) -------------------------------------------- */

int esd_rel_create(struct esd_link *l, struct rel **out);
void esd_rel_destroy(struct rel *r);
int esd_rel_send(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline_ns);
/* Next in-order frame (a copy owned by rel, valid until the next esd_rel_recv). */
int esd_rel_recv(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline_ns);
/* Feed one frame received by a link that had no reliable layer yet (the
 * peer turned it on): the layer starts with this frame. */
int esd_rel_input(struct esd_link *l, const uint8_t *frame, size_t len);
/* Wait (bounded) until the peer acknowledged everything sent. */
int esd_rel_drain(struct esd_link *l, int64_t deadline_ns);

#endif
