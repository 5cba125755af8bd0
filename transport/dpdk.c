/*
 * The dpdk backend: frames over a DPDK ethdev, kernel bypass. net_memif
 * connects two processes on one host through shared-memory rings (the
 * tested case); net_af_packet binds a Linux interface; a NIC bound to a
 * DPDK driver is opened by its PCI address (dpdk_l2.c, which also
 * addresses the peer of af_packet and PCI links by MAC).
 *
 * Packets: an Ethernet header (ethertype 0x88b5, local experimental), a
 * fragment header (message id, offset, total length) and up to dpdk_mtu
 * bytes of one frame. The frame bytes ride as an external-buffer segment
 * (no bounce copy): both vdevs used here copy them into their ring inside
 * rte_eth_tx_burst() and free the mbufs there, so the frame only has to
 * live for the duration of the send (a zero-copy PMD would need the frame
 * kept until tx completion; set ESD_DPDK_COPY=1 to copy into mbufs; a NIC
 * DMAs after tx_burst returns, so its frames are always copied). Fragments of a frame travel in
 * order; the receiver reassembles into a buffer it allocates only after the frame header (first
 * fragment) passed esd_frame_hdr_parse() against the limits. On a shared port (af_packet, a
 * NIC) a missing fragment loses the frame and the reliable layer (rel.c, always on there)
 * retransmits it. memif is shared memory and loses nothing: no reliable layer (no copy kept
 * for retransmission, no acknowledgements); a fragment out of place there fails the link, and
 * a receiver over its backlog leaves packets in the ring (its sender waits) instead of dropping.
 *
 * Idle memif receivers sleep on a doorbell their peer rings (dpdk_bell.c) rather than polling:
 * DPDK 22.11's memif has no rx interrupt, and on a host whose cores are shared the polls of
 * idle links take time from the busy ones. Idle receivers on an af_packet port sleep until
 * the port files a packet for them (dpdk_port.c); on a NIC they poll, sleeping between polls,
 * each sleep twice the last.
 *
 * Shutdown order (a memif receiver can crash if the peer unmaps the shared
 * rings while it is inside rx_burst): the side that closes sends LINK_BYE 0
 * and keeps polling only for the answer; the other side, on LINK_BYE 0,
 * answers LINK_BYE 1 and stops polling for good (the application sees
 * -ECONNRESET). The closer removes its device after the answer; the other
 * side removes its own once the link went down (or a deadline passed).
 * So neither side polls while the other tears down.
 *
 * Ports are made and removed in the EAL's interrupt thread (dpdk_eal.c,
 * which also starts the EAL), where memif handles a peer's leaving; a
 * closing link's last polls for the peer's answer run there too, for the
 * same reason.
 */
#include "dpdk_internal.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>

#define BURST         32
#define LINK_POLL_NS  (10 * ESD_NS_PER_MS)
/* An idle receiver spins this long, then sleeps between polls, IDLE_SLEEP_NS
 * first and each sleep twice the last, up to IDLE_SLEEP_MAX_NS: a reply
 * that comes within the spin is seen at once, a later one within one
 * sleep. Every sleep is a pair of context switches, which on a small or
 * virtual host costs more than the poll: with short sleeps only, the
 * polling threads of a few idle links take whole cores
 * (bench/results/transport.md). Memif and af_packet links sleep on a
 * doorbell or a wake socket after the spin; the spin is short because on
 * shared cores a long one takes the core from the peer that is to answer,
 * and it still catches a quick answer without a wake-up (both measured in
 * bench/results/transport.md). */
#define IDLE_SPIN_NS      (15 * ESD_NS_PER_US)
#define IDLE_SLEEP_NS     (10 * ESD_NS_PER_US)
#define IDLE_SLEEP_MAX_NS (1000 * ESD_NS_PER_US)
/* On a shared port (af_packet, a NIC) many link threads poll one port and
 * the kernel's af_packet path is slow anyway: each idle sleep there doubles,
 * up to this, so idle links leave the cores to the busy ones. */
#define IDLE_SLEEP_MAX_L2_NS (200 * ESD_NS_PER_US)

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

struct dpdk_listener {
	struct wire_listener wl;
	struct l2port *sp; /* af_packet or PCI: one shared port, no memif ports */
	uint8_t channel;
	uint32_t n;
	uint16_t *ports;
	char (*devs)[96];
	uint8_t *taken;
};

static unsigned dev_seq;

static int link_is_up(uint16_t port)
{
	struct rte_eth_link l;
	memset(&l, 0, sizeof(l));
	rte_eth_link_get_nowait(port, &l);
	return l.link_status == RTE_ETH_LINK_UP;
}

/* A link on port (memif: its own; l2: the shared port sp, entry slot). */
static struct dpdk_wire *wire_new(const struct esd_link_opts *o, uint16_t port, const char *dev,
                                  struct l2port *sp, struct l2slot *slot)
{
	struct dpdk_wire *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	esd_wire_init(&d->w, &esd_wire_dpdk, o);
	d->port = port;
	d->sp = sp;
	d->slot = slot;
	snprintf(d->dev, sizeof(d->dev), "%s", dev);
	d->mtu = esd_dpdk_mtu(o);
	d->was_up = 1;
	d->idle_sleep_ns = IDLE_SLEEP_NS;
	/* A shared port may drop packets (af_packet's ring, a NIC); memif is
	 * shared memory between two processes and loses none. */
	d->w.lossy = sp != NULL;
	/* Both vdevs this backend creates copy packets inside tx_burst, so the
	 * caller's frame can be sent without a bounce copy; ESD_DPDK_COPY=1
	 * turns that off (e.g. to compare). */
	d->extbuf = !getenv("ESD_DPDK_COPY");
	/* A NIC reads the packet by DMA after tx_burst returns, from memory
	 * it must be able to address: the frame is copied into mbufs. */
	if (esd_dpdk_is_pci(o))
		d->extbuf = 0;
	struct rte_ether_addr mac;
	if (!rte_eth_macaddr_get(port, &mac))
		memcpy(d->mac, mac.addr_bytes, 6);
	else
		memset(d->mac, 0x02, 6);
	if (slot) {
		d->tag.link = slot->link;
		d->tag.channel = slot->channel;
		d->tag.flags = slot->server ? FRAG_FROM_SERVER : 0; /* SYN: send_raw */
	}
	snprintf(d->w.peer, sizeof(d->w.peer), "%s", dev);
	return d;
}

static void memif_args(const struct esd_link_opts *o, int server, uint32_t id, char *buf,
                       size_t len)
{
	uint32_t mtu = esd_dpdk_mtu(o);
	uint32_t bsize = 2048, rsize = 0;
	while (bsize < mtu + ETH_HDR + FRAG_HDR && bsize < 65536)
		bsize *= 2;
	while ((1u << rsize) < esd_dpdk_ring_size(o))
		rsize++;
	snprintf(buf, len, "role=%s,socket=%s,id=%u,bsize=%u,rsize=%u", server ? "server" : "client",
	         o->addr, id, bsize > 65535 ? 65535 : bsize, rsize);
}

/* Wait for the link of port to come up within the options' timeout. */
static int wait_up(const struct esd_link_opts *o, uint16_t port)
{
	int64_t deadline = esd_now_ns() + (o->timeout_ns > 0 ? o->timeout_ns : 5 * ESD_NS_PER_S);
	while (!link_is_up(port)) {
		if (esd_now_ns() > deadline) {
			ESD_ERR("transport", "dpdk connect %s (id %u): link did not come up",
			        o->addr, o->memif_id);
			return -ETIMEDOUT;
		}
		esd_sleep_ns(5 * ESD_NS_PER_MS);
	}
	return 0;
}

/* A client link over the shared port of an interface or NIC. */
static int l2_connect(const struct esd_link_opts *o, struct wire **out)
{
	struct l2port *sp;
	struct l2slot *slot;
	int rc = esd_l2port_get(o, &sp);
	if (rc)
		return rc;
	const uint8_t *peer = o->dpdk_npeer_macs ? o->dpdk_peer_macs[0] : NULL;
	if ((rc = esd_l2port_client(sp, (uint8_t)o->dpdk_channel, (uint16_t)o->memif_id, peer, &slot))) {
		esd_l2port_put(sp);
		return rc;
	}
	struct dpdk_wire *d = NULL;
	if ((rc = wait_up(o, esd_l2port_id(sp))) ||
	    !(d = wire_new(o, esd_l2port_id(sp), esd_l2port_dev(sp), sp, slot))) {
		esd_l2port_release(sp, slot);
		esd_l2port_put(sp);
		return rc ? rc : -ENOMEM;
	}
	snprintf(d->w.peer, sizeof(d->w.peer), "%s#%u/%u", o->addr, o->memif_id, o->dpdk_channel);
	*out = &d->w;
	return 0;
}

/* Map every page of the process's memif regions now (the rings and
 * packet buffers the PMD shares with each peer, memfds named
 * memif_region_N), as the mbuf pool's at EAL start: otherwise the first
 * pass of each ring through its buffers faults in every page in the
 * middle of the job's first iterations. MADV_POPULATE_WRITE maps pages
 * writable without touching their contents, so a ring in use is safe;
 * pages mapped already cost nothing. Best effort: a kernel before 5.14
 * says EINVAL and the pages fault on first use as before. */
static void prefault_memif_regions(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (!strstr(line, "memif_region") || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		if (madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE) && errno == EINVAL)
			break;
	}
	fclose(f);
}

/* Idle links sleep (doorbells on memif, the wake socket on af_packet)
 * unless ESD_DPDK_BELL=0 (to compare); read once. */
static bool bells_on(void)
{
	static _Atomic int on = -1;
	if (on < 0) {
		const char *e = getenv("ESD_DPDK_BELL");
		on = !e || strcmp(e, "0");
	}
	return on;
}

static void bell_open(struct dpdk_wire *d, const char *addr, uint32_t id, bool server)
{
	if (!bells_on())
		return;
	int rc = esd_dpdk_bell_open(addr, id, server, &d->bell);
	if (rc)
		ESD_DBG("transport", "dpdk: memif %s#%u has no doorbell (%s): it polls when idle",
		        addr, id, esd_strerror(rc));
}

static int dpdk_connect(const struct esd_link_opts *o, struct wire **out)
{
	char name[96], args[400];
	uint16_t port;
	int rc = esd_dpdk_eal_start(o);
	if (rc)
		return rc;
	if (!esd_dpdk_is_memif(o))
		return l2_connect(o, out);
	memif_args(o, 0, o->memif_id, args, sizeof(args));
	snprintf(name, sizeof(name), "net_memif_esdc%u",
	         __atomic_fetch_add(&dev_seq, 1, __ATOMIC_RELAXED));
	if ((rc = esd_dpdk_port_up(o, name, args, &port)))
		return rc;
	struct dpdk_wire *d = NULL;
	if ((rc = wait_up(o, port)) || !(d = wire_new(o, port, name, NULL, NULL))) {
		esd_dpdk_port_down(port, name);
		return rc ? rc : -ENOMEM;
	}
	snprintf(d->w.peer, sizeof(d->w.peer), "%s#%u", o->addr, o->memif_id);
	bell_open(d, o->addr, o->memif_id, false);
	prefault_memif_regions();
	*out = &d->w;
	return 0;
}

/* A listener on the shared port of an interface or NIC: one channel. */
static int l2_listen(const struct esd_link_opts *o, struct dpdk_listener *dl)
{
	int rc = esd_l2port_get(o, &dl->sp);
	if (rc)
		return rc;
	dl->channel = (uint8_t)o->dpdk_channel;
	uint32_t max = o->max_links ? o->max_links : 1;
	if ((rc = esd_l2port_listen(dl->sp, dl->channel, max, o->dpdk_peer_macs, o->dpdk_npeer_macs))) {
		esd_l2port_put(dl->sp);
		dl->sp = NULL;
	}
	return rc;
}

static int dpdk_listen(const struct esd_link_opts *o, struct wire_listener **out)
{
	int rc = esd_dpdk_eal_start(o);
	if (rc)
		return rc;
	struct dpdk_listener *dl = calloc(1, sizeof(*dl));
	if (!dl)
		return -ENOMEM;
	dl->wl.ops = &esd_wire_dpdk;
	snprintf(dl->wl.addr, sizeof(dl->wl.addr), "%s", o->addr);
	if (!esd_dpdk_is_memif(o)) {
		if ((rc = l2_listen(o, dl)))
			free(dl);
		else
			*out = &dl->wl;
		return rc;
	}
	uint32_t n = o->max_links ? o->max_links : 1;
	dl->n = n;
	dl->ports = calloc(n, sizeof(*dl->ports));
	dl->devs = calloc(n, sizeof(*dl->devs));
	dl->taken = calloc(n, 1);
	if (!dl->ports || !dl->devs || !dl->taken) {
		rc = -ENOMEM;
		goto err_free;
	}
	unsigned seq = __atomic_fetch_add(&dev_seq, 1, __ATOMIC_RELAXED);
	/* before any port is up: a client opens the bells once its link is */
	if (bells_on() && (rc = esd_dpdk_bell_publish(o->addr, n)))
		ESD_WARN("transport", "dpdk: no doorbells for memif %s (%s): its idle links poll",
		         o->addr, esd_strerror(rc));
	uint32_t i;
	for (i = 0; i < n; i++) {
		char args[400];
		memif_args(o, 1, i, args, sizeof(args));
		snprintf(dl->devs[i], sizeof(dl->devs[i]), "net_memif_esds%u_%u", seq, i);
		if ((rc = esd_dpdk_port_up(o, dl->devs[i], args, &dl->ports[i])))
			break;
	}
	if (rc) {
		while (i--)
			esd_dpdk_port_down(dl->ports[i], dl->devs[i]);
		esd_dpdk_bell_unpublish(o->addr);
		goto err_free;
	}
	*out = &dl->wl;
	return 0;

err_free:
	free(dl->ports);
	free(dl->devs);
	free(dl->taken);
	free(dl);
	return rc;
}

/* The next link a node started on the listener's channel. The links'
 * threads and the port's ticker poll the port too, so a waiting accept
 * looks at it less and less often (200 us, doubling to 10 ms): a shard
 * that serves its nodes has no thread waking thousands of times a second
 * to take the port's lock from them. */
static int l2_accept(struct dpdk_listener *dl, const struct esd_link_opts *o, int64_t deadline,
                     struct wire **out)
{
	int64_t nap = 200 * ESD_NS_PER_US;
	for (;;) {
		esd_l2port_poll(dl->sp);
		struct l2slot *s = esd_l2port_take(dl->sp, dl->channel);
		if (s) {
			struct dpdk_wire *d =
			    wire_new(o, esd_l2port_id(dl->sp), esd_l2port_dev(dl->sp), dl->sp, s);
			if (!d) {
				esd_l2port_release(dl->sp, s);
				return -ENOMEM;
			}
			esd_l2port_ref(dl->sp); /* the link's own */
			snprintf(d->w.peer, sizeof(d->w.peer),
			         "%s#%u/%u (%02x:%02x:%02x:%02x:%02x:%02x)", dl->wl.addr,
			         (unsigned)s->link, (unsigned)s->channel, s->mac[0], s->mac[1],
			         s->mac[2], s->mac[3], s->mac[4], s->mac[5]);
			*out = &d->w;
			return 0;
		}
		if (deadline >= 0 && esd_now_ns() > deadline)
			return -ETIMEDOUT;
		esd_sleep_ns(nap);
		if (nap < 10 * ESD_NS_PER_MS)
			nap *= 2;
	}
}

static int dpdk_accept(struct wire_listener *wl, const struct esd_link_opts *o, int64_t deadline,
                       struct wire **out)
{
	struct dpdk_listener *dl = (struct dpdk_listener *)wl;
	if (dl->sp)
		return l2_accept(dl, o, deadline, out);
	for (;;) {
		int left = 0;
		for (uint32_t i = 0; i < dl->n; i++) {
			if (dl->taken[i])
				continue;
			left++;
			if (!link_is_up(dl->ports[i]))
				continue;
			struct dpdk_wire *d = wire_new(o, dl->ports[i], dl->devs[i], NULL, NULL);
			if (!d)
				return -ENOMEM;
			dl->taken[i] = 1;
			snprintf(d->w.peer, sizeof(d->w.peer), "%s#%u", wl->addr, i);
			bell_open(d, wl->addr, i, true);
			prefault_memif_regions();
			*out = &d->w;
			return 0;
		}
		if (!left && deadline < 0)
			return -EMFILE; /* every memif id is in use, for good */
		if (deadline >= 0 && esd_now_ns() > deadline)
			return -ETIMEDOUT;
		esd_sleep_ns(2 * ESD_NS_PER_MS);
	}
}

static void dpdk_listener_close(struct wire_listener *wl)
{
	struct dpdk_listener *dl = (struct dpdk_listener *)wl;
	if (dl->sp) {
		esd_l2port_unlisten(dl->sp, dl->channel);
		esd_l2port_put(dl->sp);
	}
	for (uint32_t i = 0; i < dl->n; i++)
		if (!dl->taken[i])
			esd_dpdk_port_down(dl->ports[i], dl->devs[i]);
	if (dl->n)
		esd_dpdk_bell_unpublish(dl->wl.addr);
	free(dl->ports);
	free(dl->devs);
	free(dl->taken);
	free(dl);
}

/* ---- data path ---------------------------------------------------------- */

static void rq_push(struct dpdk_wire *d, struct fbuf *r)
{
	r->next = NULL;
	if (d->rq_tail)
		d->rq_tail->next = r;
	else
		d->rq_head = r;
	d->rq_tail = r;
	d->rq_bytes += r->len;
}

static int send_raw(struct dpdk_wire *d, const uint8_t *p, size_t len);

static void ready_free(struct dpdk_wire *d, struct fbuf *r)
{
	esd_fbuf_put(&d->w.cache, r);
}

static void asm_drop(struct dpdk_wire *d)
{
	ready_free(d, d->asm_buf);
	d->asm_buf = NULL;
	d->asm_on = 0;
}

/* A packet that cannot be part of the frame being reassembled. On a
 * shared port (lossy) it is dropped with that frame, which the reliable
 * layer sends again; memif loses nothing, so there it is the peer's fault
 * and the link fails. */
static int bad_packet(struct dpdk_wire *d, const char *why)
{
	asm_drop(d);
	if (d->w.lossy)
		return 0;
	d->down = 1;
	return esd_wire_fail(&d->w, -EPROTO, "dpdk: %s from %s (memif loses nothing: the peer is broken)",
	                     why, d->w.peer);
}

/* The peer's LINK_BYE (r, consumed): phase 1 acknowledges ours; phase 0
 * is the peer leaving, answered once with phase 1. */
static void on_bye(struct dpdk_wire *d, struct fbuf *r)
{
	uint32_t phase;
	memcpy(&phase, r->data + ESD_FRAME_HDR_SIZE, 4);
	ready_free(d, r);
	if (phase == 1) {
		d->bye_acked = 1;
	} else if (!d->peer_bye) {
		struct esd_buf b;
		esd_buf_init(&b);
		d->both_closing = d->closing;
		/* the heartbeat thread sends too, and stops at peer_bye */
		pthread_mutex_lock(&d->w.tx_mu);
		if (!esd_enc_link_bye(&b, 1))
			send_raw(d, b.data, b.len);
		d->peer_bye = 1;
		pthread_mutex_unlock(&d->w.tx_mu);
		esd_buf_free(&b);
	}
}

/* One packet in: reassemble; a complete frame goes to the ready queue. */
static int on_packet(struct dpdk_wire *d, struct rte_mbuf *m)
{
	uint8_t hdr[ETH_HDR + FRAG_HDR];
	const uint8_t *h = rte_pktmbuf_read(m, 0, sizeof(hdr), hdr);
	if (!h)
		return bad_packet(d, "a runt packet");
	/* (a shared port's poller checked the rest) */
	if ((uint16_t)(h[12] << 8 | h[13]) != ETHERTYPE_ESD)
		return bad_packet(d, "a packet of another ethertype");
	struct frag_hdr f;
	esd_frag_hdr_get(h + ETH_HDR, &f);
	uint32_t id = f.id, off = f.off, total = f.total;
	size_t chunk = rte_pktmbuf_pkt_len(m) - sizeof(hdr);
	if (off == 0) {
		if (d->asm_on && !d->w.lossy)
			return bad_packet(d, "a new frame before the last one ended");
		asm_drop(d);
		struct esd_frame_hdr fh;
		uint8_t first[ESD_FRAME_HDR_SIZE];
		const uint8_t *fp = chunk >= ESD_FRAME_HDR_SIZE
		                        ? rte_pktmbuf_read(m, sizeof(hdr), sizeof(first), first)
		                        : NULL;
		if (!fp)
			return bad_packet(d, "a first fragment shorter than a frame header");
		int rc = esd_frame_hdr_parse(fp, ESD_FRAME_HDR_SIZE, &d->w.lim, &fh, d->w.err,
		                             sizeof(d->w.err));
		if (rc)
			return rc; /* the peer speaks something else: the link is broken */
		if ((size_t)total != ESD_FRAME_HDR_SIZE + (size_t)fh.length)
			return esd_wire_fail(&d->w, -EPROTO,
			                     "dpdk: fragment total %u, frame header says %zu", total,
			                     ESD_FRAME_HDR_SIZE + (size_t)fh.length);
		d->asm_buf = esd_fbuf_get(&d->w.cache, total);
		if (!d->asm_buf)
			return -ENOMEM;
		esd_wire_rx_hash_start(&d->w, d->asm_buf, fp);
		d->asm_id = id;
		d->asm_got = 0;
		d->asm_on = 1;
	} else if (!d->asm_on || id != d->asm_id || off != d->asm_got) {
		return bad_packet(d, "a fragment out of order"); /* one was lost */
	}
	if (chunk > d->asm_buf->len - d->asm_got)
		return bad_packet(d, "a fragment past its frame's end");
	/* rte_pktmbuf_read copies only for multi-segment mbufs: a single
	 * segment's bytes are copied (and hashed, on a keyed link) here */
	const uint8_t *src = rte_pktmbuf_read(m, sizeof(hdr), chunk, d->asm_buf->data + d->asm_got);
	if (!src)
		return bad_packet(d, "an unreadable fragment");
	size_t skip = off == 0 ? ESD_FRAME_HDR_SIZE : 0; /* the header: not hashed as it is */
	if (skip && src != d->asm_buf->data)
		memcpy(d->asm_buf->data, src, skip);
	esd_wire_rx_take(&d->w, d->asm_buf, d->asm_got + skip, src + skip, chunk - skip);
	d->asm_got += chunk;
	if (d->asm_got < d->asm_buf->len)
		return 0;
	struct fbuf *r = d->asm_buf;
	d->asm_buf = NULL;
	d->asm_on = 0;
	if (r->data[5] == ESD_OP_LINK_BYE && r->len == ESD_FRAME_HDR_SIZE + 4) {
		on_bye(d, r);
		return 0;
	}
	if (d->w.lossy && d->rq_bytes + r->len > d->w.rx_backlog_max) {
		ready_free(d, r);
		return 0; /* over the backlog: dropped, the sender retransmits */
	}
	rq_push(d, r);
	return 0;
}

/* A shared port's packets for this link: up to BURST of its queue, after
 * a poll of the port. */
static uint16_t l2_rx(struct dpdk_wire *d, struct rte_mbuf **ms)
{
	esd_l2port_poll(d->sp);
	uint16_t n = 0;
	while (n < BURST && (ms[n] = esd_l2ring_get(&d->slot->rx)))
		n++;
	return n;
}

/* A burst on the memif port faulted (dpdk_guard.c): the peer's memory
 * went away under it. The link is down; only its port's removal is left. */
static int ring_gone(struct dpdk_wire *d, int sig)
{
	d->down = 1;
	return esd_wire_fail(&d->w, -ECONNRESET,
	                     "dpdk: the shared memory of %s went away under this side (%s): the "
	                     "peer is gone",
	                     d->w.peer, sig == SIGBUS ? "SIGBUS" : "SIGSEGV");
}

static int rx_poll(struct dpdk_wire *d)
{
	struct rte_mbuf *ms[BURST];
	esd_dpdk_thread_enter();
	if (d->peer_bye)
		return 0; /* the peer is tearing down: never touch its rings again */
	if (d->slot && d->slot->state == L2_RESET) {
		d->down = 1;
		return esd_wire_fail(&d->w, -ECONNRESET,
		                     d->slot->server ? "dpdk: %s started a new link: this one is over"
		                                 : "dpdk: %s does not know this link (it restarted)",
		                 d->w.peer);
	}
	/* memif: over the backlog, leave the packets in the ring (its sender
	 * waits for room) rather than drop what nothing would send again */
	if (!d->w.lossy && d->rq_bytes >= d->w.rx_backlog_max)
		return 0;
	int fault = 0;
	uint16_t n = d->sp ? l2_rx(d, ms) : esd_dpdk_guarded_rx(d->port, ms, BURST, &fault);
	if (fault)
		return ring_gone(d, fault);
	int rc = 0;
	if (n)
		esd_wire_heard(&d->w);
	for (uint16_t i = 0; i < n; i++) {
		if (!rc)
			rc = on_packet(d, ms[i]);
		rte_pktmbuf_free(ms[i]);
	}
	return rc ? rc : n;
}

static int check_link(struct dpdk_wire *d)
{
	int64_t now = esd_now_ns();
	if (now < d->next_link_check)
		return 0;
	d->next_link_check = now + LINK_POLL_NS;
	if (!link_is_up(d->port)) {
		d->down = 1;
		return esd_wire_fail(&d->w, -ECONNRESET, "dpdk: link to %s went down (peer gone)",
		                     d->w.peer);
	}
	int64_t quiet = d->slot && d->slot->established
	                    ? now - atomic_load_explicit(&d->slot->last_rx_ns, memory_order_relaxed)
	                    : 0;
	if (quiet > d->w.timeout_ns) {
		d->down = 1;
		return esd_wire_fail(&d->w, -ECONNRESET, /* not -ETIMEDOUT: that is "no frame yet" */
		                     "dpdk: nothing from %s for %.1f s (keepalives every %lld ms): the "
		                     "peer is gone",
		                     d->w.peer, (double)quiet / 1e9,
		                     (long long)(L2_KEEPALIVE_NS / ESD_NS_PER_MS));
	}
	return 0;
}

static void extbuf_unused(void *addr, void *opaque)
{
	(void)addr;
	(void)opaque;
}

/* Long: a frame cut into packets, each built, queued and sent in bursts with retries until
 * the deadline; the state is the burst's. */
static int send_raw(struct dpdk_wire *d, const uint8_t *p, size_t len)
{
	struct rte_mbuf *ms[BURST];
	/* Shared info of the external-buffer segments (extbuf): every mbuf
	 * that refers to it is freed before this function returns. */
	struct rte_mbuf_ext_shared_info shinfo = {.free_cb = extbuf_unused};
	rte_mbuf_ext_refcnt_set(&shinfo, 0);
	uint32_t id = d->tx_msg++;
	size_t off = 0;
	esd_dpdk_thread_enter();
	if (d->slot)
		atomic_store_explicit(&d->slot->last_tx_ns, esd_now_ns(), memory_order_relaxed);
	int64_t stuck_since = 0;
	while (off < len) {
		unsigned k = 0;
		size_t o2 = off;
		while (k < BURST && o2 < len) {
			size_t chunk = len - o2 < d->mtu ? len - o2 : d->mtu;
			struct rte_mbuf *m = rte_pktmbuf_alloc(esd_dpdk_pool());
			if (!m)
				break;
			size_t hl = ETH_HDR + FRAG_HDR + (d->extbuf ? 0 : chunk);
			uint8_t *b = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)hl);
			if (!b) {
				rte_pktmbuf_free(m);
				break;
			}
			if (d->slot && d->slot->mac_known)
				memcpy(b, d->slot->mac, 6);
			else
				memset(b, 0xff, 6); /* memif, or a peer not known yet */
			memcpy(b + 6, d->mac, 6);
			b[12] = ETHERTYPE_ESD >> 8;
			b[13] = ETHERTYPE_ESD & 0xff;
			struct frag_hdr f = d->tag;
			if (d->slot && !d->slot->server && !d->slot->established)
				f.flags |= FRAG_SYN; /* nothing heard back yet */
			f.id = id;
			f.off = (uint32_t)o2;
			f.total = (uint32_t)len;
			esd_frag_hdr_put(b + ETH_HDR, &f);
			if (d->extbuf) {
				/* The chunk rides as an external buffer in a second
				 * segment: no copy here; the PMD copies it into its
				 * ring inside tx_burst and frees the mbuf there. */
				struct rte_mbuf *x = rte_pktmbuf_alloc(esd_dpdk_pool());
				void *at = (void *)(uintptr_t)(p + o2);
				if (!x) {
					rte_pktmbuf_free(m);
					break;
				}
				rte_mbuf_ext_refcnt_update(&shinfo, 1);
				rte_pktmbuf_attach_extbuf(x, at, (rte_iova_t)(uintptr_t)at,
				                          (uint16_t)chunk, &shinfo);
				rte_pktmbuf_append(x, (uint16_t)chunk);
				if (rte_pktmbuf_chain(m, x)) {
					rte_pktmbuf_free(x);
					rte_pktmbuf_free(m);
					break;
				}
			} else {
				memcpy(b + ETH_HDR + FRAG_HDR, p + o2, chunk);
			}
			ms[k++] = m;
			o2 += chunk;
		}
		unsigned sent = 0;
		while (sent < k) {
			int fault = 0;
			uint16_t now_sent =
			    d->sp ? esd_l2port_tx(d->sp, ms + sent, (uint16_t)(k - sent))
			          : esd_dpdk_guarded_tx(d->port, ms + sent, (uint16_t)(k - sent), &fault);
			if (fault)
				return ring_gone(d, fault); /* the mbufs given are lost */
			sent += now_sent;
			if (now_sent && d->bell)
				esd_dpdk_bell_ring(d->bell);
			if (sent < k && d->closing) {
				rte_pktmbuf_free_bulk(ms + sent, k - sent);
				return -EAGAIN;
			}
			if (sent < k) {
				/* Ring full: read what the peer sends meanwhile, so two
				 * senders never wait on each other; give up on a dead or
				 * stuck peer. */
				int64_t now = esd_now_ns();
				if (!stuck_since)
					stuck_since = now;
				int rc = rx_poll(d);
				if (rc < 0 || (rc = check_link(d)) ||
				    now - stuck_since > d->w.timeout_ns) {
					rte_pktmbuf_free_bulk(ms + sent, k - sent);
					return rc < 0 ? rc
					              : esd_wire_fail(&d->w, -ETIMEDOUT,
					                              "dpdk: peer %s takes nothing",
					                              d->w.peer);
				}
			} else {
				stuck_since = 0;
			}
		}
		off = o2;
		if (!k) {
			/* Pool empty (every link of the process shares it): free
			 * some by receiving, give up after the timeout. */
			int64_t now = esd_now_ns();
			if (!stuck_since)
				stuck_since = now;
			int rc = rx_poll(d);
			if (rc < 0)
				return rc;
			if (now - stuck_since > d->w.timeout_ns)
				return esd_wire_fail(&d->w, -ENOMEM, "dpdk: mbuf pool exhausted");
		}
	}
	return 0;
}

/* A heartbeat (one packet) from the heartbeat thread, under the wire's
 * send lock while the link's thread may be receiving: one try of the tx
 * queue (the port's lock on a shared port), -EAGAIN when the ring or the
 * pool has no room. Never receives. */
static int dpdk_beat(struct wire *w, const uint8_t *p, size_t len)
{
	struct dpdk_wire *d = (struct dpdk_wire *)w;
	if (d->peer_bye || d->down)
		return -EPIPE;
	if (len > d->mtu)
		return -EMSGSIZE;
	esd_dpdk_thread_enter();
	struct rte_mbuf *m = rte_pktmbuf_alloc(esd_dpdk_pool());
	if (!m)
		return -EAGAIN;
	uint8_t *b = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)(ETH_HDR + FRAG_HDR + len));
	if (!b) {
		rte_pktmbuf_free(m);
		return -EAGAIN;
	}
	if (d->slot && d->slot->mac_known)
		memcpy(b, d->slot->mac, 6);
	else
		memset(b, 0xff, 6);
	memcpy(b + 6, d->mac, 6);
	b[12] = ETHERTYPE_ESD >> 8;
	b[13] = ETHERTYPE_ESD & 0xff;
	struct frag_hdr f = d->tag;
	if (d->slot && !d->slot->server && !d->slot->established)
		f.flags |= FRAG_SYN;
	f.id = d->tx_msg;
	f.off = 0;
	f.total = (uint32_t)len;
	esd_frag_hdr_put(b + ETH_HDR, &f);
	memcpy(b + ETH_HDR + FRAG_HDR, p, len);
	int fault = 0;
	uint16_t sent = d->sp ? esd_l2port_tx(d->sp, &m, 1) : esd_dpdk_guarded_tx(d->port, &m, 1, &fault);
	if (fault)
		return ring_gone(d, fault);
	if (!sent) {
		rte_pktmbuf_free(m);
		return -EAGAIN;
	}
	d->tx_msg++;
	if (d->bell)
		esd_dpdk_bell_ring(d->bell);
	if (d->slot)
		atomic_store_explicit(&d->slot->last_tx_ns, esd_now_ns(), memory_order_relaxed);
	return 0;
}

static int dpdk_send(struct wire *w, const struct iovec *iov, int n, int64_t deadline)
{
	struct dpdk_wire *d = (struct dpdk_wire *)w;
	(void)deadline;
	if (d->peer_bye || d->down)
		return esd_wire_fail(w, -ECONNRESET, "dpdk: peer %s closed the link", w->peer);
	for (int i = 0; i < n; i++) {
		int rc = send_raw(d, iov[i].iov_base, iov[i].iov_len);
		if (rc)
			return rc;
	}
	return 0;
}

/* Sleep ns, with this thread's timer slack cut to 1 us first
 * (Linux's default 50 us would stretch every such sleep to 60 us). */
static void idle_sleep(int64_t ns)
{
	static __thread bool slack_set;
	if (!slack_set) {
		prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
		slack_set = true;
	}
	esd_sleep_ns(ns);
}

/* Idle with a doorbell (memif): arm it and poll once more (a packet sent
 * before the peer saw the bell armed is in the ring by then), then sleep
 * until rung, the deadline or the next link check. On an af_packet port:
 * sleep until the port has a packet for this link (dpdk_port.c). */
static void idle_wait(struct dpdk_wire *d, int64_t deadline, int64_t now)
{
	if (d->bell && !esd_dpdk_bell_armed(d->bell)) {
		esd_dpdk_bell_arm(d->bell);
		return;
	}
	int64_t t = LINK_POLL_NS;
	if (deadline >= 0 && deadline - now < t)
		t = deadline - now;
	if (d->bell)
		esd_dpdk_bell_wait(d->bell, t);
	else
		esd_l2port_idle_wait(d->sp, d->slot, t);
}

/* An af_packet link, idle, sleeps until its port files a packet for it
 * (ESD_DPDK_BELL=0: it polls, as on a NIC). */
static bool port_sleeps(struct dpdk_wire *d)
{
	return d->sp && bells_on() && esd_l2port_can_sleep(d->sp);
}

static int dpdk_recv(struct wire *w, const uint8_t **frame, size_t *len, int64_t deadline)
{
	struct dpdk_wire *d = (struct dpdk_wire *)w;
	ready_free(d, d->cur);
	d->cur = NULL;
	w->rx_run = NULL;
	for (;;) {
		if (d->rq_head) {
			struct fbuf *r = d->rq_head;
			d->rq_head = r->next;
			if (!d->rq_head)
				d->rq_tail = NULL;
			d->rq_bytes -= r->len;
			d->cur = r;
			*frame = r->data;
			*len = r->len;
			w->rx_run = r->hashed ? &r->run : NULL;
			w->rx_run_frame = r->data;
			return 0;
		}
		if (d->peer_bye)
			return esd_wire_fail(w, -ECONNRESET, "dpdk: peer %s closed the link", w->peer);
		int rc = rx_poll(d);
		if (rc < 0)
			return rc;
		if (rc > 0) {
			d->empty_polls = 0;
			d->idle_since = 0;
			d->idle_sleep_ns = IDLE_SLEEP_NS;
			if (d->bell)
				esd_dpdk_bell_disarm(d->bell);
			continue;
		}
		/* Busy-poll (kernel bypass); look at the clock only every few
		 * empty polls, and after a while yield the core a little: the
		 * test hosts have two cores for everybody. */
		if ((++d->empty_polls & 31) && deadline != 0 && !port_sleeps(d))
			continue;
		if ((rc = check_link(d)))
			return rc;
		int64_t now = esd_now_ns();
		if (deadline >= 0 && now >= deadline)
			return -ETIMEDOUT;
		if (!d->idle_since)
			d->idle_since = now;
		if (now - d->idle_since <= IDLE_SPIN_NS)
			continue;
		if (d->bell || port_sleeps(d)) {
			idle_wait(d, deadline, now);
		} else {
			idle_sleep(d->idle_sleep_ns);
			if (d->idle_sleep_ns < (d->sp ? IDLE_SLEEP_MAX_L2_NS : IDLE_SLEEP_MAX_NS))
				d->idle_sleep_ns *= 2;
		}
	}
}

struct bye_step {
	struct dpdk_wire *d;
	int send, sent, over;
};

/* Try once to send LINK_BYE 0 (send: not sent yet), then poll once for
 * the answer; over: the link failed or went down. On memif, in the
 * interrupt thread (see above), where nothing may wait for the peer: a
 * peer that leaves takes nothing, and its leaving is handled in that same
 * thread. */
static void bye_step_run(void *arg)
{
	struct bye_step *b = arg;
	struct dpdk_wire *d = b->d;
	if (b->send) {
		struct esd_buf f;
		esd_buf_init(&f);
		pthread_mutex_lock(&d->w.tx_mu);
		b->sent = !esd_enc_link_bye(&f, 0) && !send_raw(d, f.data, f.len);
		pthread_mutex_unlock(&d->w.tx_mu);
		esd_buf_free(&f);
	}
	b->over = rx_poll(d) < 0 || check_link(d);
}

/* The closing side: LINK_BYE 0, then poll only for the answer (or the
 * peer's own bye) until deadline. Sends no longer wait for room in the
 * peer's ring (closing): the bye is tried again at each step. */
static void say_bye(struct dpdk_wire *d, int64_t deadline)
{
	int sent = 0;
	d->closing = 1;
	while (!d->bye_acked && !d->peer_bye && esd_now_ns() < deadline) {
		struct bye_step b = {.d = d, .send = !sent};
		if (d->sp)
			bye_step_run(&b);
		else if (esd_dpdk_intr_call(bye_step_run, &b, d->dev))
			break;
		if (b.over)
			break;
		sent |= b.sent;
		esd_sleep_ns(50 * ESD_NS_PER_US);
	}
}

static void dpdk_close(struct wire *w, int64_t deadline)
{
	struct dpdk_wire *d = (struct dpdk_wire *)w;
	if (!d->down) {
		if (!d->peer_bye)
			say_bye(d, deadline);
		if (d->peer_bye && !d->sp && !d->both_closing) {
			/* We answered; the peer removes its device first. Ours
			 * goes in the interrupt thread, after the peer's leaving
			 * (handled there) whenever it comes. A peer that closes
			 * too polls only in its own interrupt thread, which takes
			 * our leaving in turn: no wait then. */
			while (link_is_up(d->port) && esd_now_ns() < deadline)
				esd_sleep_ns(ESD_NS_PER_MS);
		}
	}
	if (d->sp) {
		esd_l2port_release(d->sp, d->slot);
		esd_l2port_put(d->sp);
	} else {
		esd_dpdk_port_down(d->port, d->dev);
	}
	esd_dpdk_bell_close(d->bell);
	asm_drop(d);
	ready_free(d, d->cur);
	while (d->rq_head) {
		struct fbuf *r = d->rq_head;
		d->rq_head = r->next;
		ready_free(d, r);
	}
	esd_bufcache_fini(&d->w.cache);
	free(d);
}

static struct fbuf *dpdk_take(struct wire *w)
{
	struct dpdk_wire *d = (struct dpdk_wire *)w;
	struct fbuf *b = d->cur;
	d->cur = NULL;
	w->rx_run = NULL;
	return b;
}

const struct wire_ops esd_wire_dpdk = {
    .name = "dpdk",
    .not_built = NULL,
    .connect = dpdk_connect,
    .listen = dpdk_listen,
    .accept = dpdk_accept,
    .listener_close = dpdk_listener_close,
    .send = dpdk_send,
    .recv = dpdk_recv,
    .close = dpdk_close,
    .take = dpdk_take,
    .beat = dpdk_beat,
};
