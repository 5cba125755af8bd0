/*
 * Private to the dpdk backend: what its files take from each other. Calls
 * go one way, top to bottom: dpdk.c (links: made, waited on, closed) ->
 * dpdk_frag.c (their packets: fragmenting, reassembly) -> dpdk_port.c (one
 * af_packet or PCI port shared by many links), dpdk_bell.c (memif
 * doorbells) -> dpdk_eal.c (the EAL, the pool, ports) -> dpdk_l2.c (a NIC
 * by PCI address; the peer addressing of af_packet and PCI ports) and
 * dpdk_guard.c (bursts on a memif port that survive its peer's leaving).
 * A file may skip levels downwards, never call upwards. Not installed.
 */
#ifndef ESD_TRANSPORT_DPDK_INTERNAL_H
#define ESD_TRANSPORT_DPDK_INTERNAL_H

#include "link_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <esd/clock.h>

#include <rte_mempool.h>

/* Descriptors per rx and tx ring of the options (dpdk_queue; 0: 256 for
 * memif, 1024 for a shared port). */
uint16_t esd_dpdk_ring_size(const struct esd_link_opts *o);
/* Frame bytes per packet: o->dpdk_mtu, else the default (8192). */
uint32_t esd_dpdk_mtu(const struct esd_link_opts *o);

/*
 * The NIC at PCI address pci (DDDD:BB:DD.F), probed by the EAL or now:
 * configured for packets of up to payload bytes after the Ethernet header
 * (its MTU), one rx and one tx queue of ring descriptors (cut to the
 * NIC's limits, logged), started. One link at a time per NIC port: a
 * second gets -EBUSY. Returns 0 with the port, -ENODEV (no such device
 * for DPDK: not bound to a DPDK driver, or hidden from the EAL), -EINVAL
 * (payload above the NIC's MTU), -EBUSY, or the driver's -errno; logged.
 */
int esd_dpdk_pci_port_up(const char *pci, struct rte_mempool *pool, uint32_t payload, uint16_t ring,
                         uint16_t *port);
/* Stop the port and free it for the next link; the device stays probed
 * (a link opened again finds it). */
void esd_dpdk_pci_port_down(uint16_t port);

/* 0 if the Linux interface carries payload bytes after the Ethernet
 * header (its MTU); -EINVAL (logged) if not, -ENODEV if there is none. */
int esd_dpdk_iface_mtu_check(const char *iface, uint32_t payload);

/* ---- packets ----------------------------------------------------------- */

#define ETH_HDR       14u
#define FRAG_HDR      16u
#define ETHERTYPE_ESD 0x88b5

/* flags of a packet's fragment header */
#define FRAG_FROM_SERVER 0x01u /* sent by the listener's side of the link */
#define FRAG_SYN         0x02u /* the client has heard nothing back on this link yet */
#define FRAG_RST         0x04u /* the listener knows no such link (it restarted) */
#define FRAG_KEEPALIVE   0x08u /* no frame: the sender is alive (total 0) */

/* The 16 bytes after the Ethernet header: the frame's message id, this
 * fragment's offset in it and its total length; then the link's address on
 * a shared port: the client's link id (memif_id), the listener's channel
 * (dpdk_channel) and the flags. Little-endian, as every field of the wire
 * protocol. */
struct frag_hdr {
	uint32_t id, off, total;
	uint16_t link;
	uint8_t channel, flags;
};

void esd_frag_hdr_put(uint8_t *p, const struct frag_hdr *h);
void esd_frag_hdr_get(const uint8_t *p, struct frag_hdr *h);

/* ---- one port, many links (dpdk_port.c) -------------------------------- */

/*
 * Over af_packet and a NIC, every link of a process on one interface shares
 * one ethdev port (an l2port): a PS shard serves every node over its one
 * interface, a node reaches every shard over its own. The port's table
 * (l2tab) says which link a packet belongs to:
 *
 * - a client link is (channel, link id): it takes packets FROM_SERVER with
 *   its address from its peer's MAC (given, or learned from the first
 *   answer; broadcast until then);
 * - a listener serves one channel; its links are (peer MAC, link id). A
 *   packet with SYN from a new (MAC, link id) of an allowed MAC starts a
 *   link (NEW, until accept takes it); a SYN for a link that already heard
 *   a packet without SYN means the peer started over: the old link is
 *   RESET (its owner sees -ECONNRESET) and a new one starts. A client's
 *   packet without SYN for no link of the channel (the listener restarted)
 *   is answered with RST, which RESETs the client's link: a restarted shard
 *   is noticed at once, as a TCP peer's reset is. Other packets of nobody's
 *   link are dropped (the reliable layer sends them again).
 *
 * Whichever thread polls the port first (a trylock) receives a burst and
 * files each packet in its link's queue; every link reads its own queue.
 * Transmits take the port's tx lock.
 *
 * No kernel tells a link that its peer died, so the port's keepalive
 * thread polls the port every L2_TICK_NS and sends KEEPALIVE on every link
 * that sent nothing for L2_KEEPALIVE_NS (whether or not its owner is
 * polling: a node's trainers may compute for seconds); a link that heard
 * nothing for its timeout_ns is gone. A KEEPALIVE to a restarted shard
 * draws its RST.
 */

#define L2_TICK_NS      (20 * 1000 * 1000LL)
#define L2_KEEPALIVE_NS (100 * 1000 * 1000LL)

#define L2_MAX_SLOTS  256 /* links per port */
#define L2_MAX_LISTEN 16  /* listeners (channels) per port */
#define L2_RING       1024 /* packets queued for one link */

enum l2_state { L2_NEW = 1, L2_TAKEN, L2_RESET };

/* Packets waiting for one link: one producer at a time (the poller, under
 * the port's rx lock), one consumer (the link's thread). */
struct l2ring {
	void *pkt[L2_RING];
	_Atomic uint32_t head, tail;
};

struct l2slot {
	bool server; /* a listener's link (else a client's) */
	uint8_t channel;
	uint16_t link;
	/* written by the poller under the rx lock; the link's thread reads
	 * mac_known (then mac) and established without it */
	uint8_t mac[6];          /* the peer's */
	_Atomic bool mac_known;  /* client: until then it sends to broadcast */
	_Atomic bool established; /* server: a packet without SYN came; client:
	                           * the peer answered (it sends no more SYN) */
	_Atomic int state;
	_Atomic int64_t last_rx_ns, last_tx_ns; /* esd_now_ns() */
	/* af_packet: the link's own wake socket, made and used by its
	 * thread (esd_l2port_idle_wait); -1 none yet, -2 the kernel refused */
	int wake_fd;
	struct l2ring rx;
};

struct l2listen {
	bool on;
	uint8_t channel;
	uint32_t max;      /* links at once */
	uint32_t nallowed; /* 0: any source */
	uint8_t (*allowed)[6];
};

struct l2tab {
	uint8_t own[6]; /* the port's MAC */
	struct l2slot *slot[L2_MAX_SLOTS];
	struct l2listen lis[L2_MAX_LISTEN];
};

/* The table's decisions (no EAL: unit-tested in test_dpdk_l2). The caller
 * holds the port's rx lock. */
/* The link the packet whose first ETH_HDR + FRAG_HDR bytes are h belongs
 * to, starting a server link when h asks for one; NULL: drop it. *rst:
 * answer it with RST (a client's packet of a link this side does not
 * know); a client link that receives RST from its peer is RESET. */
struct l2slot *esd_l2tab_route(struct l2tab *t, const uint8_t *h, bool *rst);
/* A client link (channel, link id), its peer's MAC given (or NULL: learned).
 * 0, -EADDRINUSE (that address is taken on this port), -ENOSPC, -ENOMEM. */
int esd_l2tab_client(struct l2tab *t, uint8_t channel, uint16_t link, const uint8_t *peer_mac,
                     struct l2slot **out);
/* Serve channel: max links, from the allowed MACs (n 0: any; copied).
 * 0, -EADDRINUSE (a listener of that channel exists), -ENOSPC, -ENOMEM. */
int esd_l2tab_listen(struct l2tab *t, uint8_t channel, uint32_t max, const uint8_t (*allowed)[6],
                     uint32_t nallowed);
/* Stop serving channel: its links not yet accepted are freed with free_pkt
 * on each packet they hold. */
void esd_l2tab_unlisten(struct l2tab *t, uint8_t channel, void (*free_pkt)(void *));
/* A NEW link of channel, now TAKEN; NULL if none. */
struct l2slot *esd_l2tab_take(struct l2tab *t, uint8_t channel);
/* Forget a link and free what it holds. */
void esd_l2tab_release(struct l2tab *t, struct l2slot *s, void (*free_pkt)(void *));

/* Queue a packet for s (the poller): false when its queue is full. */
bool esd_l2ring_put(struct l2ring *r, void *pkt);
/* The next packet for s (its link's thread), or NULL. */
void *esd_l2ring_get(struct l2ring *r);

/* A shared port: the table, the ethdev and its locks. */
struct l2port;
struct rte_mbuf;

/* The port of interface or NIC o->addr (af_packet or pci), made on first
 * use (that link's options set it up) and shared by later links; each
 * holder calls esd_l2port_put(). 0 or the port's -errno (logged). */
int esd_l2port_get(const struct esd_link_opts *o, struct l2port **out);
void esd_l2port_put(struct l2port *p);
/* One more holder of p (a link accepted on a listener's port). */
void esd_l2port_ref(struct l2port *p);
uint16_t esd_l2port_id(const struct l2port *p);
const char *esd_l2port_dev(const struct l2port *p);
/* esd_l2tab_client / _listen / _unlisten / _take / _release under the lock. */
int esd_l2port_client(struct l2port *p, uint8_t channel, uint16_t link, const uint8_t *peer_mac,
                      struct l2slot **out);
int esd_l2port_listen(struct l2port *p, uint8_t channel, uint32_t max, const uint8_t (*allowed)[6],
                      uint32_t nallowed);
void esd_l2port_unlisten(struct l2port *p, uint8_t channel);
struct l2slot *esd_l2port_take(struct l2port *p, uint8_t channel);
void esd_l2port_release(struct l2port *p, struct l2slot *s);
/* Receive a burst, if no other thread is at it, and file it. */
void esd_l2port_poll(struct l2port *p);
/* rte_eth_tx_burst under the port's tx lock. */
uint16_t esd_l2port_tx(struct l2port *p, struct rte_mbuf **ms, uint16_t n);
/*
 * Idle links sleep (af_packet): each link's thread, idle, waits on a
 * packet socket of its own on the interface, which the kernel gives one
 * byte of every packet for that link (a filter matches the link's
 * address as esd_l2tab_route does; keepalives do not wake). A packet thus
 * wakes the one thread it is for, which polls the port and finds it
 * filed, by itself or by whoever polled first. esd_l2port_can_sleep: the
 * port is af_packet's (a NIC's links poll, as a NIC's cores should).
 */
bool esd_l2port_can_sleep(const struct l2port *p);
/* The classic BPF program of s's wake socket in f: one byte of each
 * packet of s's link but keepalives (esd_l2tab_route's rules: a client link
 * by channel and link id from the server's side, a server link by those
 * and its client's MAC from the client's side). Returns its length. */
#define L2_WAKE_FILTER_MAX 16
struct sock_filter;
unsigned esd_l2_wake_filter(const struct l2slot *s, struct sock_filter *f);
/* Sleep until a packet for s came or timeout_ns passed (s's thread). */
void esd_l2port_idle_wait(struct l2port *p, struct l2slot *s, int64_t timeout_ns);

/* ---- doorbells of memif links (dpdk_bell.c) ---------------------------- */

/*
 * An idle memif receiver sleeps on a futex in memory shared with its peer
 * instead of polling; the peer, after putting packets in the ring, wakes it
 * if it sleeps. The listener of a memif address publishes the region (one
 * slot per link id); each link opens its own view of it.
 */
struct dpdk_bell;

/* Make the region of the listener at addr, nslots links, anew (any older
 * one is removed, and so are those of listeners that are gone: killed, they
 * could not remove their own). 0 or -errno. */
int esd_dpdk_bell_publish(const char *addr, uint32_t nslots);
/* Remove it (links that opened it keep their view). */
void esd_dpdk_bell_unpublish(const char *addr);
/* The bells of link id at addr, on the listener's side (server) or the
 * client's. 0; -ENOENT (nothing published), -EPROTO (another layout, or
 * no such id), -errno. The caller owns *out: esd_dpdk_bell_close(). */
int esd_dpdk_bell_open(const char *addr, uint32_t id, bool server, struct dpdk_bell **out);
void esd_dpdk_bell_close(struct dpdk_bell *b);
/* Receiver: about to sleep. Poll the ring once more after this; sleep
 * with esd_dpdk_bell_wait(), or esd_dpdk_bell_disarm() if packets came. */
void esd_dpdk_bell_arm(struct dpdk_bell *b);
bool esd_dpdk_bell_armed(const struct dpdk_bell *b);
void esd_dpdk_bell_disarm(struct dpdk_bell *b);
/* Sleep until rung or timeout_ns passed (arms first if needed); disarmed
 * on return. */
void esd_dpdk_bell_wait(struct dpdk_bell *b, int64_t timeout_ns);
/* Sender: packets are in the peer's ring; wake it if it sleeps. */
void esd_dpdk_bell_ring(struct dpdk_bell *b);

/* ---- dpdk_guard.c: bursts on memif ports ------------------------------- */

/* Install the fault handler of guarded bursts (once per process). */
void esd_dpdk_guard_init(void);
/* rte_eth_rx_burst / rte_eth_tx_burst on queue 0 of a memif port; *fault:
 * 0, or the signal (SIGSEGV, SIGBUS) with which the port's shared memory
 * went away during the burst (its peer left): the burst's mbufs are lost
 * and the port must only be taken down. */
uint16_t esd_dpdk_guarded_rx(uint16_t port, struct rte_mbuf **ms, uint16_t n, int *fault);
uint16_t esd_dpdk_guarded_tx(uint16_t port, struct rte_mbuf **ms, uint16_t n, int *fault);

/* ---- dpdk_eal.c: the EAL, the pool, ports (dpdk.c and dpdk_port.c) ----- */

/* Start the EAL once per process (o's dpdk_eal_args, the default's for
 * memif and af_packet): 0, or -ENODEV (it cannot start, or it was started
 * before this process forked). */
int esd_dpdk_eal_start(const struct esd_link_opts *o);
/* What the options' link runs on: a memif (the default), a PCI NIC. */
int esd_dpdk_is_memif(const struct esd_link_opts *o);
int esd_dpdk_is_pci(const struct esd_link_opts *o);
/* Run fn(arg) in the EAL's interrupt thread (an alarm due at once) and
 * wait for it, at most 10 s; in that thread already, run it. 0, or -errno
 * when it did not run and never will (what names the work in the log). */
int esd_dpdk_intr_call(void (*fn)(void *), void *arg, const char *what);

/* Create (a vdev) or find (a NIC by PCI address) the port of name, set it
 * up and start it; and take it down again. */
int esd_dpdk_port_up(const struct esd_link_opts *o, const char *name, const char *devargs,
                     uint16_t *port);
void esd_dpdk_port_down(uint16_t port, const char *name);
/* The port's link is up (memif: the peer is connected). */
int esd_dpdk_port_is_up(uint16_t port);
/* The process's mbuf pool (the EAL is up). */
struct rte_mempool *esd_dpdk_pool(void);

/*
 * The calling thread is about to allocate or free mbufs: make it a
 * registered (non-EAL) lcore, once, so that it gets its own mempool
 * cache. An unregistered thread takes and returns every mbuf through the
 * pool's shared ring, and when a thread is preempted inside a ring
 * operation (two cores for a dozen polling threads) the others spin until
 * it runs again. The lcore is given back (its cache flushed into the
 * pool) when the thread exits: a process has at most RTE_MAX_LCORE. Cheap
 * after the first call.
 */
void esd_dpdk_thread_enter(void);
/* The devargs of the options' port for one process (af_packet). */
int esd_dpdk_l2_devargs(const struct esd_link_opts *o, char *buf, size_t len);

/* ---- a link and its packets (dpdk.c, dpdk_frag.c) ---------------------- */

/* How often a link looks at its port's state and its peer's silence. */
#define LINK_POLL_NS (10 * ESD_NS_PER_MS)

struct dpdk_wire {
	struct wire w;
	uint16_t port;
	char dev[96];
	uint32_t mtu;
	uint32_t tx_msg;
	/* reassembly of the frame in progress */
	struct fbuf *asm_buf;
	uint32_t asm_id;
	size_t asm_got;
	int asm_on;
	/* complete frames not yet handed up; cur is lent */
	struct fbuf *rq_head, *rq_tail, *cur;
	size_t rq_bytes;
	int was_up, peer_bye, bye_acked, down;
	int closing; /* in dpdk_close: a send that finds no room gives up at once */
	int both_closing; /* the peer's bye came while closing: it polls no more */
	int extbuf; /* the PMD copies on tx (memif copy mode, af_packet) */
	/* af_packet or PCI: the shared port and this link's entry in it */
	struct l2port *sp;
	struct l2slot *slot;
	struct frag_hdr tag; /* link, channel, flags of every packet sent */
	uint8_t mac[6];
	int64_t next_link_check;
	uint64_t empty_polls;
	int64_t idle_since; /* first empty poll of this idle stretch; 0: busy */
	int64_t idle_sleep_ns; /* the next idle sleep */
	struct dpdk_bell *bell; /* memif: sleep until the peer sends (or NULL) */
};

static inline void dpdk_ready_free(struct dpdk_wire *d, struct fbuf *r)
{
	esd_fbuf_put(&d->w.cache, r);
}

/* Drop the frame being reassembled. */
void esd_dpdk_asm_drop(struct dpdk_wire *d);
/* Receive a burst and reassemble it (complete frames to the ready queue):
 * the packets seen, or -errno (the link failed). */
int esd_dpdk_rx_poll(struct dpdk_wire *d);
/* Every LINK_POLL_NS: is the port up, has the peer of a shared port been
 * heard within the timeout? 0, or the link's failure. */
int esd_dpdk_check_link(struct dpdk_wire *d);
/* Send one frame of len bytes as fragments (under the wire's send lock):
 * 0 or -errno. */
int esd_dpdk_send_raw(struct dpdk_wire *d, const uint8_t *p, size_t len);
/* The wire_ops beat: one packet, one try. */
int esd_dpdk_beat(struct wire *w, const uint8_t *p, size_t len);

#endif /* ESD_TRANSPORT_DPDK_INTERNAL_H */
