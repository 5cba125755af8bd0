/*
 * esd/transport.h - links between node daemons and PS shards.
 *
 * Model
 * -----
 * A link carries whole frames of the wire protocol (esd/proto.h,
 * docs/protocol.md) between two processes. A client opens one with
 * esd_link_connect(); a server opens a listener with esd_listener_open()
 * and takes links from it with esd_listener_accept(). The backend is chosen
 * by name in the options:
 *
 *   "tcp"   the default: TCP sockets driven by io_uring (one ring per link,
 *           a batch of frames is one submission), or by poll(2) when the
 *           build has no liburing or tcp_engine = "poll".
 *   "dpdk"  DPDK ethdev: net_memif between processes on one host (kernel
 *           bypass), net_af_packet on a Linux interface, or a NIC bound to
 *           a DPDK driver by its PCI address (dpdk_vdev). Frames are cut
 *           into packets; memif loses none (an idle receiver sleeps on a
 *           doorbell its peer rings), and over af_packet and a NIC, which
 *           may drop packets, the reliable layer below carries them and
 *           packets go to the peer's MAC address (given,
 *           or learned from its first packet), and every link of a process
 *           on one interface shares its port: a listener serves every node
 *           over one interface, telling links apart by source MAC and link
 *           id (memif_id), listeners by channel (dpdk_channel).
 *   "rdma"  libibverbs reliable-connected queue pairs. With no RDMA device
 *           (always the case on the test hosts) connect and listen fail with
 *           -ENODEV and the log line "no RDMA device".
 *
 * Every backend fills one ops table (transport/link_internal.h); a backend
 * whose dependency was missing at build time answers every call with
 * -ENOTSUP and esd_transport_backend_check() says "not built: <reason>".
 *
 * Layers, top to bottom, the same for every backend:
 *
 *   application frames
 *   accounting   bytes / rows / frames per transfer kind (esd_link_stats)
 *   job key      with o->key: the handshake, then a tag on every frame,
 *                checked and stripped on receipt (esd/auth.h)
 *   reliable     sequence numbers, cumulative LINK_ACK, retransmission of
 *                the oldest frame when no ack came for a timeout that
 *                follows the round trip (at least rto_ns) or at once
 *                after three acks that repeat the last one, then of
 *                each next one a copy's ack shows missing,
 *                reorder buffer, duplicate suppression; on for dpdk
 *                over af_packet and a NIC, and for every backend while
 *                fault injection is on (or reliable = 1); tcp, dpdk memif
 *                and rdma RC are reliable by themselves
 *   shaping      a token bucket (bit/s), applied to every byte put on the
 *                wire, retransmissions included
 *   faults       drop / duplicate / reorder with probabilities and a seed
 *                (tests only), applied to whole frames on the send side
 *   backend      tcp | dpdk | rdma
 *
 * So with faults on, every frame is still delivered exactly once and in
 * order; an application-level duplicate (a push re-sent after a reconnect)
 * is caught by the exactly-once helper of esd/dedup.h.
 *
 * Threads: a link is used by one thread at a time, except
 * esd_link_set_rate(), esd_link_get_rate() and esd_link_stats(), which any
 * thread may call at any time. esd_link_send() does not deadlock against a
 * peer that is itself sending: while it waits to write it reads what the
 * peer sends into the link's receive backlog (bounded by
 * rx_backlog_max; beyond it the send fails with -ENOBUFS).
 *
 * Example (a PS shard: one thread per accepted link)
 * -------
 *     struct esd_link_opts o;
 *     esd_link_opts_init(&o);
 *     o.addr = "0.0.0.0:7400";
 *     esd_listener_open(&o, &ls);
 *     for (;;) { esd_listener_accept(ls, -1, &l); start a thread serving l; }
 *   and in that thread:
 *     while (!(rc = esd_link_recv(l, &m, -1))) {
 *             esd_buf_reset(&out);
 *             switch (m.hdr.op) {      // m's views are valid until the next recv
 *             case ESD_OP_PULL: encode a PULL_RESP into out (esd_enc_rows_*); break;
 *             case ESD_OP_PUSH_GRAD: if esd_dedup_check() == 1, apply; encode ACK; break;
 *             ...
 *             }
 *             esd_link_send(l, out.data, out.len);
 *     }
 *     if (rc != -ECONNRESET) esd_link_send_error(l, rc, esd_link_last_error(l));
 *     esd_link_close(l);
 * tests/transport/peer.c is a complete small server in this shape.
 *
 * Caveats
 * -------
 * - A message returned by esd_link_recv() points into the link's buffers
 *   and is valid until the next esd_link_recv() or esd_link_close().
 * - After esd_link_recv() returns an error other than -ETIMEDOUT the link's
 *   receive side is broken (the stream cannot be resynchronised): answer
 *   with esd_link_send_error() if you like, then close it.
 * - A crashed peer is detected: a closed socket, a memif link that went
 *   down, or no acknowledgement for timeout_ns, ends in -ECONNRESET or
 *   -ETIMEDOUT; nothing waits on a dead peer forever. A peer that vanishes
 *   without closing (a stopped process, a host gone, a frame held back on
 *   the path) is found by heartbeats (heartbeat_ns, peer_timeout_ns): a
 *   receive that heard nothing for peer_timeout_ns fails with -ETIMEDOUT
 *   and the link is broken (esd_link_broken()), the error saying "heard
 *   nothing from <peer> for ...". Heartbeats are link-internal frames
 *   (never returned by esd_link_recv()); on a keyed link they are tagged
 *   like every frame, under the link's frame counter, so a frame held back
 *   shows as a failed tag at the next heartbeat.
 * - DPDK: one EAL per process, started by the first dpdk link with
 *   dpdk_eal_args, never stopped before exit. A child forked after that
 *   cannot use dpdk links (-ENODEV): fork first, then open links.
 * - DPDK close order matters for memif (a receiver whose peer unmaps the
 *   shared rings mid-burst can crash): esd_link_close() runs a LINK_BYE
 *   handshake so that both sides have stopped polling before either side
 *   removes its device. A dpdk listener creates its max_links memif ports
 *   (ids 0..max_links-1) up front; a client picks its id (memif_id). A DPDK
 *   build allows 32 ports per process.
 * - tcp connect retries a refused connection until timeout_ns (a PS that
 *   is still starting), then fails with -ECONNREFUSED.
 * - rdma: the queue-pair data path is written against libibverbs and
 *   checked against rdma-core's rc_pingpong (device by name, port, GID
 *   index, LID check, the two sides' QPs both ready before either sends)
 *   but has never run (no RDMA device or soft-RoCE on the project's
 *   hosts); only the no-device path is tested.
 */
#ifndef ESD_TRANSPORT_H
#define ESD_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <esd/auth.h>
#include <esd/proto.h>
#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct esd_link;
struct esd_listener;

/* Fault injection (tests). Probabilities in [0, 1] per frame sent. */
struct esd_fault_opts {
	double drop;    /* the frame is not sent */
	double dup;     /* the frame is sent twice */
	double reorder; /* the frame is held back and sent after the next one */
	uint64_t seed;  /* PRNG seed; the same seed gives the same decisions */
	uint64_t drop_seq; /* the reliable layer's frame of this sequence number
	                    * is lost at its first sending (0: none) */
};

struct esd_link_opts {
	const char *backend; /* "tcp" (NULL = "tcp"), "dpdk", "rdma" */
	/* tcp, rdma: "host:port" (listen: port 0 picks a free one); dpdk: the
	 * memif control socket path (af_packet: the interface name). */
	const char *addr;
	struct esd_proto_limits limits; /* what the receiver accepts (0 = defaults) */
	uint64_t rate_bps;              /* token bucket rate in bit/s; 0 = unshaped */
	uint64_t burst_bytes;           /* bucket depth; 0 = max(16 KiB, 10 ms of rate) */
	/* a bucket shared with other links (esd_uplink_create): when set, the
	 * link's sends draw from it instead of a bucket of their own
	 * (rate_bps and burst_bytes are the uplink's), and the rate functions
	 * below act on it. It must outlive the link. */
	struct esd_uplink *uplink;
	/* the job key (esd/auth.h): links start with the mutual handshake
	 * and tag every frame; NULL: no key (a peer with one is refused).
	 * A link copies it; a listener keeps the pointer, so the key must
	 * outlive the listener. */
	const struct esd_key *key;
	struct esd_fault_opts faults;
	int reliable;           /* 1: reliable layer even without faults */
	int64_t timeout_ns;     /* dead-peer timeout (connect, acks); 0 = 5 s */
	/* Heartbeats: a link that sent nothing for heartbeat_ns sends a
	 * LINK_HEARTBEAT, from a thread of the transport's own, which nothing
	 * else blocks (so a peer whose application is busy writing a
	 * checkpoint or solving still beats); a link that heard nothing from
	 * its peer (not a byte) for peer_timeout_ns while receiving is dead:
	 * esd_link_recv() fails with -ETIMEDOUT, the link is broken and its
	 * error names the peer. 0: off (each). */
	int64_t heartbeat_ns;
	int64_t peer_timeout_ns;
	int64_t rto_ns;         /* first and least retransmission timeout; 0 = 20 ms
	                         * (it follows the measured round trip) */
	uint32_t window;        /* reliable layer: most unacked frames; 0 = 256 */
	size_t rx_backlog_max;  /* bytes buffered while a send waits; 0 = 256 MiB */
	const char *tcp_engine; /* "uring" or "poll"; NULL = uring when built */
	/* dpdk */
	const char *dpdk_eal_args; /* NULL = "--no-pci --no-huge --no-shconf -m 512
	                            * --no-telemetry --log-level=*:warning" */
	/* "memif" (NULL); "af_packet": addr is a Linux interface; "pci": addr
	 * is the PCI address (DDDD:BB:DD.F) of a NIC bound to a DPDK driver,
	 * which dpdk_eal_args must let the EAL see (no --no-pci) */
	const char *dpdk_vdev;
	/* connect: the link's id (e.g. the worker's rank): memif's interface
	 * id; af_packet and pci: the id its packets carry, so that links from
	 * one station stay apart (0..65535) */
	uint32_t memif_id;
	uint32_t max_links;        /* listen: links at once (memif: ids
	                            * 0..max_links-1); 0 = 1 */
	/* af_packet, pci: the listener a link belongs to among those of one
	 * interface (the shard's index, 0..255); a client names its shard's */
	uint32_t dpdk_channel;
	uint32_t dpdk_mtu;         /* frame bytes per packet; 0 = 8192. af_packet,
	                            * pci: at most the interface's MTU - 16 */
	uint32_t dpdk_queue;       /* descriptors per rx and tx ring (memif: its
	                            * ring size), a power of two; 0 = 256 for
	                            * memif, 1024 for af_packet and pci */
	/* af_packet, pci: the peers' MAC addresses. connect: the peer's, [0]:
	 * packets go there and only packets from it are taken. listen: the
	 * peers that may connect; packets from others are ignored. None (0
	 * of them): the link learns its peer from the first packet it takes
	 * (broadcast until then). Packets addressed to another station are
	 * ignored either way. The array must outlive the link or listener. */
	const uint8_t (*dpdk_peer_macs)[6];
	uint32_t dpdk_npeer_macs;
	/* rdma (the checks of rdma-core's rc_pingpong, see esd_transport_probe) */
	const char *rdma_device;   /* NULL or "": the first device */
	uint32_t rdma_port;        /* the device's port; 0 = 1 */
	int32_t rdma_gid_index;    /* the port's GID index, routes by GID (RoCE
	                            * needs one); -1: none, by LID (InfiniBand) */
};

/* Defaults (all zero / NULL, backend "tcp"). */
void esd_link_opts_init(struct esd_link_opts *o);

/*
 * Is a backend usable in this build? Returns 0, -ENOENT (no backend of that
 * name) or -ENOTSUP (not built); *why (if not NULL) receives a static
 * sentence, "not built: <reason>" for -ENOTSUP.
 */
int esd_transport_backend_check(const char *name, const char **why);

/*
 * Check, before any link opens, that the device the options name is there
 * (a program calls it at start, so that a wrong device stops it at once
 * rather than at its first connect). rdma: the device (rdma_device, or any
 * one), its port rdma_port (ACTIVE), the GID at rdma_gid_index, or a LID
 * when rdma_gid_index is -1. The other backends have nothing to check
 * before a link opens. Returns 0, -ENOENT / -ENOTSUP (see
 * esd_transport_backend_check), -ENODEV (no RDMA device, none of that
 * name, no such port or it is down; the log line says "no RDMA device" or
 * names the device and lists those there are), -EINVAL (no such GID
 * index, or a LID-routed port without a LID).
 */
int esd_transport_probe(const struct esd_link_opts *o);

/*
 * Open a client link to o->addr and return it in *out (caller closes it
 * with esd_link_close()). Returns 0 or -EINVAL (bad options or address),
 * -ENOENT / -ENOTSUP (see esd_transport_backend_check), -ECONNREFUSED,
 * -ETIMEDOUT (no peer within timeout_ns), -ENODEV (rdma: no RDMA device;
 * dpdk: EAL failed to start), -ENOMEM, or another -errno of the backend.
 * With o->key, the job key handshake runs before it returns: -EACCES (the
 * peer does not hold the key, has none, or refused this client), -EAGAIN
 * (the peer has no room for another link now: try again later).
 * The error is logged with what and where.
 */
int esd_link_connect(const struct esd_link_opts *o, struct esd_link **out);

/* Open a listener on o->addr (caller closes it with esd_listener_close()).
 * Errors as esd_link_connect(), plus -EADDRINUSE. */
int esd_listener_open(const struct esd_link_opts *o, struct esd_listener **out);
/* The address clients should use ("127.0.0.1:40123"; the memif socket
 * path). Returns 0 or -ENOSPC if it does not fit len. */
int esd_listener_addr(const struct esd_listener *l, char *buf, size_t len);
/* Wait up to timeout_ns (< 0: forever) for the next link. Returns 0 with the
 * link in *out (caller closes it), -ETIMEDOUT, or a -errno of the backend. */
int esd_listener_accept(struct esd_listener *l, int64_t timeout_ns, struct esd_link **out);
/* Stop listening; links already accepted stay open. Accepts NULL. */
void esd_listener_close(struct esd_listener *l);

/*
 * Send len bytes holding one or more whole encoded frames (a batch, e.g.
 * a struct esd_buf filled by the encoders). Blocks until the frames are
 * handed to the backend (shaped to the link's rate; with the reliable layer,
 * until the window has room). The link sets each header's seq. Frames are
 * checked against the protocol defaults (body at most
 * ESD_PROTO_DEFAULT_MAX_BODY), not against the peer's limits, which only
 * the peer knows: configure both ends alike. Returns 0,
 * -EINVAL (len does not cover whole well-formed frame headers), -EPIPE (the
 * link was closed or broken), -ECONNRESET (the peer went away), -ETIMEDOUT
 * (no acknowledgement for timeout_ns), -ENOBUFS (receive backlog full).
 */
int esd_link_send(struct esd_link *l, const void *frames, size_t len);

/*
 * Frames tagged in the encoder's buffer (a keyed link whose tags are
 * gmac.c's): esd_link_send() copies each frame into a sealed buffer as it
 * hashes it. Instead, after each frame is encoded at offset start of b
 * (the last frame in b), esd_link_tag_in_place() marks it tagged, appends
 * room for its tag and hashes it while the encoder's bytes are still in the
 * cache (the frame must not change after); esd_link_send_tagged() then
 * writes each frame's tag under the link's next counter nonce and sends
 * the frames where they lie. Every frame of b must be so marked. esd_link_tag_in_place() returns 0, -ENOTSUP (not
 * such a link: esd_link_can_tag_in_place() is 0; send as usual), -ENOMEM,
 * -EINVAL; esd_link_send_tagged() as esd_link_send(), -EINVAL for a frame
 * not marked.
 */
int esd_link_can_tag_in_place(const struct esd_link *l);
int esd_link_tag_in_place(struct esd_link *l, struct esd_buf *b, size_t start);
int esd_link_send_tagged(struct esd_link *l, struct esd_buf *b);

/*
 * Send frames given in pieces (esd_gather_iov() of esd/proto.h): the bytes
 * of iov[0..n) in order are one or more whole frames, each frame's header
 * within one piece. Where the link can (esd_link_zero_copy()), the pieces
 * go from where they lie: tcp writes them with one writev, rdma posts them
 * as scatter-gather entries over memory registered with
 * esd_transport_register_memory() (other and small pieces through its own
 * registered buffers). Otherwise they are copied into one buffer and sent
 * as esd_link_send() sends; on a link that tags in place
 * (esd_link_can_tag_in_place()) that copy is the only one: each frame is
 * hashed there while the copy is in the CPU's cache, not copied again into
 * a sealed one. The memory may change once this returns.
 * Returns as esd_link_send(); -EINVAL names the piece that breaks a frame.
 */
int esd_link_sendv(struct esd_link *l, const struct iovec *iov, int n);
/* 1 when esd_link_sendv() sends pieces in place on l: the backend can, and
 * no job key (tags), reliable layer (copies kept for retransmission) or
 * fault injection is in the way; else 0. */
int esd_link_zero_copy(const struct esd_link *l);

/*
 * Memory that links may send from in place, e.g. a node's cache region in
 * huge pages: each rdma link registers it with its device once (at its
 * next send; not per frame) and sends rows lying in it without a copy.
 * Regions do not overlap; at most ESD_TRANSPORT_MAX_REGIONS. Returns 0,
 * -EINVAL, -EEXIST (overlaps one registered), -ENOSPC. Unregister only
 * after the links that sent from it are closed (they hold the device's
 * registration until then). Thread-safe.
 */
#define ESD_TRANSPORT_MAX_REGIONS 8
int esd_transport_register_memory(const void *base, size_t len);
/* Returns 0 or -ENOENT. */
int esd_transport_unregister_memory(const void *base);

/* Encode and send an ERROR frame (best effort: the link may be broken).
 * Returns as esd_link_send(). */
int esd_link_send_error(struct esd_link *l, int code, const char *text);

/*
 * Receive the next application frame, decoded into *m (views into the
 * link's buffer; see Caveats). timeout_ns < 0 waits forever, 0 polls.
 * Returns 0, -ETIMEDOUT, -ECONNRESET (the peer closed or crashed; also a
 * frame cut short by a close), -EPIPE (the link is closed or broken), or a
 * decoder error (-ESD_EBADMAGIC, -ESD_EBADVERSION, -EPROTO, -EMSGSIZE,
 * -E2BIG) with the reason in esd_link_last_error(). Never allocates more
 * than limits.max_body for one frame.
 */
int esd_link_recv(struct esd_link *l, struct esd_msg *m, int64_t timeout_ns);

/* Text of the last error on the link (static storage of the link; "" if
 * none). */
const char *esd_link_last_error(const struct esd_link *l);
/* Whether the link failed for good (its peer is gone, or it lost sync):
 * every later send or receive fails; close it and connect again. */
int esd_link_broken(const struct esd_link *l);
/* Whether the peer proved it holds the job key (the link's handshake is
 * done); 0 on a link without a key. */
int esd_link_proven(const struct esd_link *l);
/* End a link from any thread while its own thread may be receiving: that
 * receive returns an error soon (at once on tcp) and the link is broken;
 * its own thread still closes it. */
void esd_link_abort(struct esd_link *l);
/* Backend name ("tcp", ...) and peer description; owned by the link. */
const char *esd_link_backend(const struct esd_link *l);
const char *esd_link_peer(const struct esd_link *l);

/* Close the link (orderly where the backend has an order, see Caveats),
 * free it. Accepts NULL. */
void esd_link_close(struct esd_link *l);

/*
 * An uplink: one token bucket several links draw from, e.g. a node's links
 * to every PS shard, which share the node's one network link (its rate is
 * the node's, not each link's). Thread-safe.
 */
struct esd_uplink;
int esd_uplink_create(uint64_t rate_bps, uint64_t burst_bytes, struct esd_uplink **out);
void esd_uplink_set_rate(struct esd_uplink *u, uint64_t rate_bps);
/* Accepts NULL. The links using it must be closed first. */
void esd_uplink_free(struct esd_uplink *u);

/* Set the shaping rate in bit/s (0 = unshaped). Thread-safe; takes effect
 * on the next frame sent. */
void esd_link_set_rate(struct esd_link *l, uint64_t rate_bps);
uint64_t esd_link_get_rate(const struct esd_link *l);

/* Per-link counters. Bytes are whole frames (header + body) as the
 * application sent or received them, classified with esd_proto_classify();
 * retransmissions and link-internal frames are counted apart. */
struct esd_link_kind_stats {
	uint64_t tx_bytes, tx_rows, tx_frames;
	uint64_t rx_bytes, rx_rows, rx_frames;
};

struct esd_link_stats {
	struct esd_link_kind_stats kind[ESD_XFER_NKINDS];
	uint64_t wire_tx_bytes; /* all bytes handed to the backend */
	uint64_t retx_frames;   /* reliable layer retransmissions */
	uint64_t dup_rx_frames; /* duplicates the reliable layer dropped */
	uint64_t fault_drops, fault_dups, fault_reorders;
	uint64_t shaped_wait_ns; /* time spent waiting for the token bucket */
	uint64_t in_place_bytes; /* esd_link_sendv() bytes sent in pieces, not copied */
	uint64_t auth_tx_cpu_ns; /* time tagging frames sent (job key), on
	                          * whichever thread sent them: its CPU time
	                          * but where that thread was preempted */
	uint64_t auth_rx_cpu_ns; /* time checking received frames' tags (the same) */
	uint64_t rate_bps;
	int reliable; /* the reliable layer is on */
};

/* Snapshot the counters (each read atomically; the set is not one instant).
 * Thread-safe. */
void esd_link_stats(const struct esd_link *l, struct esd_link_stats *out);
/* The per-kind counters of a snapshot as STATS entries (ESD_XFER_NKINDS of
 * them, kind order), e.g. to answer a STATS request with esd_enc_stats(). */
void esd_link_stats_entries(const struct esd_link_stats *st,
                            struct esd_stats_entry out[ESD_XFER_NKINDS]);
/* Zero the counters (rate and flags stay). Thread-safe. */
void esd_link_stats_reset(struct esd_link *l);

/* What a link really carries, estimated from these counters and the
 * caller's timing of its transfer phases: esd/rate_est.h (esdd's). */

#ifdef __cplusplus
}
#endif
#endif /* ESD_TRANSPORT_H */
