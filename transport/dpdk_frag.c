/*
 * The dpdk backend's packets: a frame cut into fragments and sent in
 * bursts, and the fragments received reassembled into frames (the links
 * themselves are dpdk.c's).
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
 */
#include "dpdk_internal.h"

#include <esd/clock.h>
#include <esd/err.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#define BURST         32

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

void esd_dpdk_asm_drop(struct dpdk_wire *d)
{
	dpdk_ready_free(d, d->asm_buf);
	d->asm_buf = NULL;
	d->asm_on = 0;
}

/* A packet that cannot be part of the frame being reassembled. On a
 * shared port (lossy) it is dropped with that frame, which the reliable
 * layer sends again; memif loses nothing, so there it is the peer's fault
 * and the link fails. */
static int bad_packet(struct dpdk_wire *d, const char *why)
{
	esd_dpdk_asm_drop(d);
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
	dpdk_ready_free(d, r);
	if (phase == 1) {
		d->bye_acked = 1;
	} else if (!d->peer_bye) {
		struct esd_buf b;
		esd_buf_init(&b);
		d->both_closing = d->closing;
		/* the heartbeat thread sends too, and stops at peer_bye */
		pthread_mutex_lock(&d->w.tx_mu);
		if (!esd_enc_link_bye(&b, 1))
			esd_dpdk_send_raw(d, b.data, b.len);
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
		esd_dpdk_asm_drop(d);
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
		dpdk_ready_free(d, r);
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

int esd_dpdk_rx_poll(struct dpdk_wire *d)
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

int esd_dpdk_check_link(struct dpdk_wire *d)
{
	int64_t now = esd_now_ns();
	if (now < d->next_link_check)
		return 0;
	d->next_link_check = now + LINK_POLL_NS;
	if (!esd_dpdk_port_is_up(d->port)) {
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
int esd_dpdk_send_raw(struct dpdk_wire *d, const uint8_t *p, size_t len)
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
				int rc = esd_dpdk_rx_poll(d);
				if (rc < 0 || (rc = esd_dpdk_check_link(d)) ||
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
			int rc = esd_dpdk_rx_poll(d);
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
int esd_dpdk_beat(struct wire *w, const uint8_t *p, size_t len)
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
