/*
 * The dpdk backend: frames over a DPDK ethdev, kernel bypass. net_memif
 * connects two processes on one host through shared-memory rings (the
 * tested case); net_af_packet binds a Linux interface; a NIC bound to a
 * DPDK driver is opened by its PCI address (dpdk_l2.c, which also
 * addresses the peer of af_packet and PCI links by MAC). This file makes,
 * waits on and closes links; their packets (a frame cut into fragments,
 * reassembled) are dpdk_frag.c's.
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
		d->tag.flags = slot->server ? FRAG_FROM_SERVER : 0; /* SYN: esd_dpdk_send_raw */
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
	while (!esd_dpdk_port_is_up(port)) {
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
			if (!esd_dpdk_port_is_up(dl->ports[i]))
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

static int dpdk_send(struct wire *w, const struct iovec *iov, int n, int64_t deadline)
{
	struct dpdk_wire *d = (struct dpdk_wire *)w;
	(void)deadline;
	if (d->peer_bye || d->down)
		return esd_wire_fail(w, -ECONNRESET, "dpdk: peer %s closed the link", w->peer);
	for (int i = 0; i < n; i++) {
		int rc = esd_dpdk_send_raw(d, iov[i].iov_base, iov[i].iov_len);
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
	dpdk_ready_free(d, d->cur);
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
		int rc = esd_dpdk_rx_poll(d);
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
		if ((rc = esd_dpdk_check_link(d)))
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
		b->sent = !esd_enc_link_bye(&f, 0) && !esd_dpdk_send_raw(d, f.data, f.len);
		pthread_mutex_unlock(&d->w.tx_mu);
		esd_buf_free(&f);
	}
	b->over = esd_dpdk_rx_poll(d) < 0 || esd_dpdk_check_link(d);
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
			while (esd_dpdk_port_is_up(d->port) && esd_now_ns() < deadline)
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
	esd_dpdk_asm_drop(d);
	dpdk_ready_free(d, d->cur);
	while (d->rq_head) {
		struct fbuf *r = d->rq_head;
		d->rq_head = r->next;
		dpdk_ready_free(d, r);
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
    .beat = esd_dpdk_beat,
};
