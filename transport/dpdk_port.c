/*
 * One port, many links: every af_packet or NIC link of a process on one
 * interface shares one ethdev port, and the port's table says which link a
 * packet belongs to (dpdk_internal.h has the rules). A PS shard thus serves
 * every node over one interface, and a node reaches every shard over its
 * own, with the reliable layer per link as over memif.
 *
 * Locks: the registry's (ports by name), then a port's rx lock (its table
 * and receiving) and its tx lock (transmitting), never the other way.
 *
 * Idle links of an af_packet port do not poll: the packets come through
 * the kernel anyway, and on a host whose cores are shared polling takes
 * them from the busy threads. Each link's thread opens a packet socket of
 * its own on the interface (its wake socket) with a filter that passes
 * one byte of each packet of its link and nothing else, and waits in
 * ppoll() on it: the kernel wakes the one thread a packet is for, as it
 * wakes a TCP socket's reader, and no thread wakes another.
 */
#include "dpdk_internal.h"

#include <esd/clock.h>
#include <esd/log.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#define POLL_BURST 32
/* a link without a wake socket, idle, polls this often */
#define L2_NOWAKE_NS (200 * 1000LL)

static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

void esd_frag_hdr_put(uint8_t *p, const struct frag_hdr *h)
{
	memcpy(p, &h->id, 4);
	memcpy(p + 4, &h->off, 4);
	memcpy(p + 8, &h->total, 4);
	memcpy(p + 12, &h->link, 2);
	p[14] = h->channel;
	p[15] = h->flags;
}

void esd_frag_hdr_get(const uint8_t *p, struct frag_hdr *h)
{
	memcpy(&h->id, p, 4);
	memcpy(&h->off, p + 4, 4);
	memcpy(&h->total, p + 8, 4);
	memcpy(&h->link, p + 12, 2);
	h->channel = p[14];
	h->flags = p[15];
}

/* ---- the table ---------------------------------------------------------- */

bool esd_l2ring_put(struct l2ring *r, void *pkt)
{
	uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	if (head - tail >= L2_RING)
		return false;
	r->pkt[head % L2_RING] = pkt;
	atomic_store_explicit(&r->head, head + 1, memory_order_release);
	return true;
}

void *esd_l2ring_get(struct l2ring *r)
{
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint32_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	if (tail == head)
		return NULL;
	void *pkt = r->pkt[tail % L2_RING];
	atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
	return pkt;
}

static struct l2listen *listener_of(struct l2tab *t, uint8_t channel)
{
	for (unsigned i = 0; i < L2_MAX_LISTEN; i++)
		if (t->lis[i].on && t->lis[i].channel == channel)
			return &t->lis[i];
	return NULL;
}

static bool allowed(const struct l2listen *l, const uint8_t *mac)
{
	if (!l->nallowed)
		return true;
	for (uint32_t i = 0; i < l->nallowed; i++)
		if (!memcmp(l->allowed[i], mac, 6))
			return true;
	return false;
}

/* A free entry of the table, or -1. */
static int free_entry(const struct l2tab *t)
{
	for (int i = 0; i < L2_MAX_SLOTS; i++)
		if (!t->slot[i])
			return i;
	return -1;
}

static struct l2slot *slot_new(struct l2tab *t, bool server, uint8_t channel, uint16_t link,
                               const uint8_t *mac)
{
	int i = free_entry(t);
	if (i < 0)
		return NULL;
	struct l2slot *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->server = server;
	s->channel = channel;
	s->link = link;
	if (mac) {
		memcpy(s->mac, mac, 6);
		s->mac_known = true;
	}
	s->wake_fd = -1;
	atomic_init(&s->state, server ? L2_NEW : L2_TAKEN);
	atomic_init(&s->last_rx_ns, esd_now_ns());
	atomic_init(&s->last_tx_ns, 0);
	t->slot[i] = s;
	return s;
}

/* A packet from a client: its server link, or a new one on SYN. *rst:
 * a packet of a link this side does not know (a restarted shard), which
 * the poller answers with RST. */
static struct l2slot *route_to_server(struct l2tab *t, const uint8_t *src,
                                      const struct frag_hdr *f, bool *rst)
{
	struct l2listen *l = listener_of(t, f->channel);
	if (!l)
		return NULL;
	struct l2slot *match = NULL;
	uint32_t live = 0;
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++) {
		struct l2slot *s = t->slot[i];
		if (!s || !s->server || s->channel != f->channel || s->state == L2_RESET)
			continue;
		live++;
		if (s->link == f->link && !memcmp(s->mac, src, 6))
			match = s;
	}
	if (match) {
		if (!(f->flags & FRAG_SYN)) {
			match->established = true;
			return match;
		}
		if (!match->established)
			return match; /* the client is still starting this link */
		/* the peer started a new link at the same address: the old one
		 * is over */
		atomic_store(&match->state, L2_RESET);
		live--;
	}
	if (!allowed(l, src))
		return NULL; /* a stranger */
	if (!(f->flags & FRAG_SYN)) {
		*rst = f->off == 0; /* once a frame */
		return NULL;
	}
	if (live >= l->max)
		return NULL; /* full: it retries */
	return slot_new(t, true, f->channel, f->link, src);
}

/* A packet from a server: the client link at its address. RST ends it. */
static struct l2slot *route_to_client(struct l2tab *t, const uint8_t *src,
                                      const struct frag_hdr *f)
{
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++) {
		struct l2slot *s = t->slot[i];
		if (!s || s->server || s->channel != f->channel || s->link != f->link)
			continue;
		if (s->mac_known && memcmp(s->mac, src, 6))
			return NULL;
		if (f->flags & FRAG_RST) {
			if (s->mac_known)
				atomic_store(&s->state, L2_RESET);
			return NULL;
		}
		if (!s->mac_known) {
			memcpy(s->mac, src, 6); /* the shard's first answer names it */
			s->mac_known = true;
		}
		s->established = true;
		return s;
	}
	return NULL;
}

/* The packet is a KEEPALIVE (h: its first ETH_HDR + FRAG_HDR bytes). */
static bool l2_is_keepalive(const uint8_t *h)
{
	return (h[ETH_HDR + 15] & FRAG_KEEPALIVE) != 0;
}

struct l2slot *esd_l2tab_route(struct l2tab *t, const uint8_t *h, bool *rst)
{
	const uint8_t *dst = h, *src = h + 6;
	*rst = false;
	if ((uint16_t)(h[12] << 8 | h[13]) != ETHERTYPE_ESD)
		return NULL;
	if (memcmp(dst, t->own, 6) && memcmp(dst, bcast, 6))
		return NULL; /* for another station */
	struct frag_hdr f;
	esd_frag_hdr_get(h + ETH_HDR, &f);
	return f.flags & FRAG_FROM_SERVER ? route_to_client(t, src, &f)
	                                  : route_to_server(t, src, &f, rst);
}

int esd_l2tab_client(struct l2tab *t, uint8_t channel, uint16_t link, const uint8_t *peer_mac,
                     struct l2slot **out)
{
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++) {
		const struct l2slot *s = t->slot[i];
		if (s && !s->server && s->channel == channel && s->link == link)
			return -EADDRINUSE;
	}
	if (free_entry(t) < 0)
		return -ENOSPC;
	*out = slot_new(t, false, channel, link, peer_mac);
	return *out ? 0 : -ENOMEM;
}

int esd_l2tab_listen(struct l2tab *t, uint8_t channel, uint32_t max, const uint8_t (*macs)[6],
                     uint32_t nallowed)
{
	if (listener_of(t, channel))
		return -EADDRINUSE;
	for (unsigned i = 0; i < L2_MAX_LISTEN; i++) {
		struct l2listen *l = &t->lis[i];
		if (l->on)
			continue;
		memset(l, 0, sizeof(*l));
		if (nallowed) {
			l->allowed = malloc((size_t)nallowed * sizeof(*l->allowed));
			if (!l->allowed)
				return -ENOMEM;
			memcpy(l->allowed, macs, (size_t)nallowed * sizeof(*l->allowed));
		}
		l->nallowed = nallowed;
		l->channel = channel;
		l->max = max ? max : 1;
		l->on = true;
		return 0;
	}
	return -ENOSPC;
}

void esd_l2tab_release(struct l2tab *t, struct l2slot *s, void (*free_pkt)(void *))
{
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++)
		if (t->slot[i] == s)
			t->slot[i] = NULL;
	for (void *pkt; (pkt = esd_l2ring_get(&s->rx));)
		free_pkt(pkt);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	free(s);
}

void esd_l2tab_unlisten(struct l2tab *t, uint8_t channel, void (*free_pkt)(void *))
{
	struct l2listen *l = listener_of(t, channel);
	if (!l)
		return;
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++) {
		struct l2slot *s = t->slot[i];
		if (s && s->server && s->channel == channel && s->state == L2_NEW)
			esd_l2tab_release(t, s, free_pkt);
	}
	free(l->allowed);
	memset(l, 0, sizeof(*l));
}

struct l2slot *esd_l2tab_take(struct l2tab *t, uint8_t channel)
{
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++) {
		struct l2slot *s = t->slot[i];
		if (s && s->server && s->channel == channel && s->state == L2_NEW) {
			atomic_store(&s->state, L2_TAKEN);
			return s;
		}
	}
	return NULL;
}

/* ---- the port ----------------------------------------------------------- */

struct l2port {
	struct l2port *next;
	pthread_t ticker; /* polls and sends keepalives */
	_Atomic bool stop;
	char name[96]; /* the interface or PCI address */
	char dev[96];  /* the ethdev's name */
	uint16_t port;
	int refs; /* under reg_lock */
	pthread_mutex_t rx_lock, tx_lock;
	struct l2tab tab; /* under rx_lock */
	bool sleeps; /* af_packet: idle links wait on their wake sockets */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct l2port *ports;
static unsigned port_seq;

static void free_mbuf(void *pkt)
{
	rte_pktmbuf_free(pkt);
}

static void send_ctl(struct l2port *p, const uint8_t *dst, uint16_t link, uint8_t channel,
                     uint8_t flags, struct rte_mempool *pool);

/* KEEPALIVE on every live link that sent nothing for L2_KEEPALIVE_NS (a
 * client once its peer answered: until then it is still connecting). */
static void keepalives(struct l2port *p, struct rte_mempool *pool)
{
	int64_t now = esd_now_ns();
	pthread_mutex_lock(&p->rx_lock);
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++) {
		struct l2slot *s = p->tab.slot[i];
		if (!s || s->state != L2_TAKEN || !s->established ||
		    now - atomic_load(&s->last_tx_ns) < L2_KEEPALIVE_NS)
			continue;
		atomic_store(&s->last_tx_ns, now);
		send_ctl(p, s->mac, s->link, s->channel,
		         (uint8_t)(FRAG_KEEPALIVE | (s->server ? FRAG_FROM_SERVER : 0)), pool);
	}
	pthread_mutex_unlock(&p->rx_lock);
}

static void *ticker(void *arg)
{
	prctl(PR_SET_NAME, "esd-l2-ticker", 0, 0, 0);
	struct l2port *p = arg;
	struct rte_mempool *pool = esd_dpdk_pool();
	while (!atomic_load(&p->stop)) {
		esd_l2port_poll(p);
		keepalives(p, pool);
		esd_sleep_ns(L2_TICK_NS);
	}
	return NULL;
}

unsigned esd_l2_wake_filter(const struct l2slot *s, struct sock_filter *f)
{
	const unsigned flags = ETH_HDR + 15, link = ETH_HDR + 12, chan = ETH_HDR + 14;
	/* the fragment header is little-endian, BPF loads are big-endian */
	uint32_t link_be = (uint32_t)((s->link & 0xff) << 8 | s->link >> 8);
	unsigned n = 0;
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, flags);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, FRAG_KEEPALIVE, 0xff, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, FRAG_FROM_SERVER);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
	                                      s->server ? 0 : FRAG_FROM_SERVER, 0, 0xff);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_B | BPF_ABS, chan);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, s->channel, 0, 0xff);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_ABS, link);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, link_be, 0, 0xff);
	if (s->server) {
		const uint8_t *m = s->mac;
		uint32_t hi = (uint32_t)m[0] << 24 | m[1] << 16 | m[2] << 8 | m[3];
		f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 6);
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, hi, 0, 0xff);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 10);
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
		                                      (uint32_t)(m[4] << 8 | m[5]), 0, 0xff);
	}
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 1);
	f[n] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, 0);
	/* every 0xff above jumps to the last instruction: drop */
	for (unsigned i = 0; i < n; i++) {
		if (f[i].jt == 0xff)
			f[i].jt = (uint8_t)(n - i - 1);
		if (f[i].jf == 0xff)
			f[i].jf = (uint8_t)(n - i - 1);
	}
	return n + 1;
}

/* The wake socket of link s on interface iface: its packets coming in,
 * one byte of each, a small buffer (only "something came" matters). -1
 * when the kernel refuses (then the link polls). */
static int wake_socket(const char *iface, const struct l2slot *s)
{
	unsigned idx = if_nametoindex(iface);
	int fd = idx ? socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC,
	                      htons(ETHERTYPE_ESD))
	             : -1;
	if (fd < 0)
		return -1;
	struct sockaddr_ll a = {.sll_family = AF_PACKET,
	                        .sll_protocol = htons(ETHERTYPE_ESD),
	                        .sll_ifindex = (int)idx};
	struct sock_filter prog[L2_WAKE_FILTER_MAX];
	struct sock_fprog fp = {.len = (unsigned short)esd_l2_wake_filter(s, prog), .filter = prog};
	int on = 1, buf = 4096;
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof(fp)) ||
	    bind(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	/* best effort: without it this side's own packets wake it too */
	(void)setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof(on));
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	return fd;
}

/* The af_packet PMD's own socket on iface (ETH_P_ALL, not the wake
 * socket): found among this process's descriptors, -1 if none. */
static int pmd_socket(const char *iface)
{
	int idx = (int)if_nametoindex(iface), found = -1;
	DIR *d = idx ? opendir("/proc/self/fd") : NULL;
	if (!d)
		return -1;
	for (struct dirent *e; found < 0 && (e = readdir(d));) {
		int fd = atoi(e->d_name), domain = 0;
		struct sockaddr_ll a;
		socklen_t dl = sizeof(domain), al = sizeof(a);
		if (fd <= 2 || fd == dirfd(d) ||
		    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) || domain != AF_PACKET ||
		    getsockname(fd, (struct sockaddr *)&a, &al) || a.sll_ifindex != idx ||
		    a.sll_protocol != htons(ETH_P_ALL))
			continue;
		found = fd;
	}
	closedir(d);
	return found;
}

/* Room in the send buffer of the PMD's socket for every frame of its tx
 * ring. The PMD fills ring frames and kicks the kernel once a burst; the
 * kernel takes frames only while the socket's send buffer has room, and a
 * frame it left is sent at the next kick. Where the interface's qdisc
 * holds packets (tc shaping) the default buffer (wmem_default) fills after
 * a few dozen packets and the rest of a frame would wait for whatever
 * burst comes next; with room for the whole ring every kick sends all. */
static void widen_send_buffer(const struct esd_link_opts *o)
{
	int fd = pmd_socket(o->addr);
	long want = (long)esd_dpdk_ring_size(o) * (ETH_HDR + FRAG_HDR + esd_dpdk_mtu(o) + 2048);
	int v = want > INT32_MAX / 2 ? INT32_MAX / 2 : (int)want, got = 0;
	socklen_t gl = sizeof(got);
	if (fd < 0) {
		ESD_WARN("transport", "dpdk: the af_packet socket on %s was not found: its send "
		         "buffer stays at wmem_default, and a frame may wait in the ring where "
		         "the interface queues packets (tc)", o->addr);
		return;
	}
	/* FORCE needs CAP_NET_ADMIN; without it wmem_max caps the size */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof(v)))
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
	if (!getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &got, &gl) && got < v)
		ESD_DBG("transport", "dpdk: af_packet send buffer on %s: %d bytes of %d (raise "
		        "net.core.wmem_max)", o->addr, got, v);
}

static int port_open(const struct esd_link_opts *o, struct l2port *p)
{
	char args[400];
	bool pci = !strcmp(o->dpdk_vdev, "pci");
	int rc = esd_dpdk_l2_devargs(o, args, sizeof(args));
	if (rc)
		return rc;
	if (pci)
		snprintf(p->dev, sizeof(p->dev), "%s", o->addr);
	else
		snprintf(p->dev, sizeof(p->dev), "net_af_packet_esd%u", port_seq++);
	if ((rc = esd_dpdk_port_up(o, p->dev, args, &p->port)))
		return rc;
	p->sleeps = !pci;
	if (!pci)
		widen_send_buffer(o);
	struct rte_ether_addr mac;
	if (!rte_eth_macaddr_get(p->port, &mac))
		memcpy(p->tab.own, mac.addr_bytes, 6);
	return 0;
}

int esd_l2port_get(const struct esd_link_opts *o, struct l2port **out)
{
	pthread_mutex_lock(&reg_lock);
	struct l2port *p;
	for (p = ports; p; p = p->next)
		if (!strcmp(p->name, o->addr))
			break;
	int rc = 0;
	if (p) {
		p->refs++;
	} else if (!(p = calloc(1, sizeof(*p)))) {
		rc = -ENOMEM;
	} else {
		snprintf(p->name, sizeof(p->name), "%s", o->addr);
		pthread_mutex_init(&p->rx_lock, NULL);
		pthread_mutex_init(&p->tx_lock, NULL);
		if ((rc = port_open(o, p))) {
			free(p);
			p = NULL;
		} else if ((rc = -pthread_create(&p->ticker, NULL, ticker, p))) {
			esd_dpdk_port_down(p->port, p->dev);
			free(p);
			p = NULL;
		} else {
			p->refs = 1;
			p->next = ports;
			ports = p;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	*out = p;
	return rc;
}

void esd_l2port_put(struct l2port *p)
{
	pthread_mutex_lock(&reg_lock);
	bool last = --p->refs == 0;
	if (last)
		for (struct l2port **pp = &ports; *pp; pp = &(*pp)->next)
			if (*pp == p) {
				*pp = p->next;
				break;
			}
	pthread_mutex_unlock(&reg_lock);
	if (!last)
		return;
	atomic_store(&p->stop, true);
	pthread_join(p->ticker, NULL);
	esd_dpdk_port_down(p->port, p->dev);
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++)
		if (p->tab.slot[i])
			esd_l2tab_release(&p->tab, p->tab.slot[i], free_mbuf);
	for (unsigned i = 0; i < L2_MAX_LISTEN; i++)
		free(p->tab.lis[i].allowed);
	pthread_mutex_destroy(&p->rx_lock);
	pthread_mutex_destroy(&p->tx_lock);
	free(p);
}

void esd_l2port_ref(struct l2port *p)
{
	pthread_mutex_lock(&reg_lock);
	p->refs++;
	pthread_mutex_unlock(&reg_lock);
}

uint16_t esd_l2port_id(const struct l2port *p)
{
	return p->port;
}

const char *esd_l2port_dev(const struct l2port *p)
{
	return p->dev;
}

int esd_l2port_client(struct l2port *p, uint8_t channel, uint16_t link, const uint8_t *peer_mac,
                      struct l2slot **out)
{
	pthread_mutex_lock(&p->rx_lock);
	int rc = esd_l2tab_client(&p->tab, channel, link, peer_mac, out);
	pthread_mutex_unlock(&p->rx_lock);
	if (rc == -EADDRINUSE)
		ESD_ERR("transport",
		        "dpdk: %s already carries a link with id %u to channel %u in this "
		        "process (one per memif_id and dpdk_channel)",
		        p->name, (unsigned)link, (unsigned)channel);
	return rc;
}

int esd_l2port_listen(struct l2port *p, uint8_t channel, uint32_t max, const uint8_t (*allowed)[6],
                      uint32_t nallowed)
{
	pthread_mutex_lock(&p->rx_lock);
	int rc = esd_l2tab_listen(&p->tab, channel, max, allowed, nallowed);
	pthread_mutex_unlock(&p->rx_lock);
	if (rc == -EADDRINUSE)
		ESD_ERR("transport", "dpdk: %s already has a listener on channel %u in this process",
		        p->name, (unsigned)channel);
	return rc;
}

void esd_l2port_unlisten(struct l2port *p, uint8_t channel)
{
	pthread_mutex_lock(&p->rx_lock);
	esd_l2tab_unlisten(&p->tab, channel, free_mbuf);
	pthread_mutex_unlock(&p->rx_lock);
}

struct l2slot *esd_l2port_take(struct l2port *p, uint8_t channel)
{
	pthread_mutex_lock(&p->rx_lock);
	struct l2slot *s = esd_l2tab_take(&p->tab, channel);
	pthread_mutex_unlock(&p->rx_lock);
	return s;
}

void esd_l2port_release(struct l2port *p, struct l2slot *s)
{
	pthread_mutex_lock(&p->rx_lock);
	esd_l2tab_release(&p->tab, s, free_mbuf);
	pthread_mutex_unlock(&p->rx_lock);
}

/* A packet of headers only to dst for link/channel, with flags. */
static void send_ctl(struct l2port *p, const uint8_t *dst, uint16_t link, uint8_t channel,
                     uint8_t flags, struct rte_mempool *pool)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(pool);
	uint8_t *b = m ? (uint8_t *)rte_pktmbuf_append(m, ETH_HDR + FRAG_HDR) : NULL;
	if (!b) {
		rte_pktmbuf_free(m);
		return;
	}
	memcpy(b, dst, 6);
	memcpy(b + 6, p->tab.own, 6);
	b[12] = ETHERTYPE_ESD >> 8;
	b[13] = ETHERTYPE_ESD & 0xff;
	struct frag_hdr f = {.link = link, .channel = channel, .flags = flags};
	esd_frag_hdr_put(b + ETH_HDR, &f);
	if (!esd_l2port_tx(p, &m, 1))
		rte_pktmbuf_free(m);
}

/* Answer a packet of an unknown link (h: its headers) with RST. */
static void send_rst(struct l2port *p, const uint8_t *h, struct rte_mempool *pool)
{
	struct frag_hdr f;
	esd_frag_hdr_get(h + ETH_HDR, &f);
	send_ctl(p, h + 6, f.link, f.channel, FRAG_FROM_SERVER | FRAG_RST, pool);
}

/* Receive a burst and file it; wait: take the rx lock even if another
 * thread holds it (else leave the port to that thread). The packets
 * received. */
static uint16_t poll_port(struct l2port *p, bool wait)
{
	esd_dpdk_thread_enter();
	if (wait)
		pthread_mutex_lock(&p->rx_lock);
	else if (pthread_mutex_trylock(&p->rx_lock))
		return 0; /* another link's thread is filing packets */
	struct rte_mbuf *ms[POLL_BURST];
	uint16_t n = rte_eth_rx_burst(p->port, 0, ms, POLL_BURST);
	int64_t now = n ? esd_now_ns() : 0;
	for (uint16_t i = 0; i < n; i++) {
		uint8_t buf[ETH_HDR + FRAG_HDR];
		const uint8_t *h = rte_pktmbuf_read(ms[i], 0, sizeof(buf), buf);
		bool rst = false;
		struct l2slot *s = h ? esd_l2tab_route(&p->tab, h, &rst) : NULL;
		if (rst)
			send_rst(p, h, ms[i]->pool);
		if (s)
			atomic_store_explicit(&s->last_rx_ns, now, memory_order_relaxed);
		if (!s || l2_is_keepalive(h) || !esd_l2ring_put(&s->rx, ms[i]))
			rte_pktmbuf_free(ms[i]);
	}
	pthread_mutex_unlock(&p->rx_lock);
	return n;
}

void esd_l2port_poll(struct l2port *p)
{
	poll_port(p, false);
}

bool esd_l2port_can_sleep(const struct l2port *p)
{
	return p->sleeps;
}

static bool ring_empty(struct l2ring *r)
{
	return atomic_load_explicit(&r->head, memory_order_acquire) ==
	       atomic_load_explicit(&r->tail, memory_order_relaxed);
}

/* Take every byte the wake socket holds, in one call. */
static void drain(int fd)
{
	uint8_t b[16];
	struct iovec iov[16];
	struct mmsghdr mm[16];
	memset(mm, 0, sizeof(mm));
	for (unsigned i = 0; i < 16; i++) {
		iov[i] = (struct iovec){.iov_base = &b[i], .iov_len = 1};
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	while (recvmmsg(fd, mm, 16, MSG_DONTWAIT, NULL) == 16)
		;
}

/* The link's wake socket is drained first, then the port polled with the
 * lock waited for until it is empty: a packet whose byte was taken is by
 * then in the port's ring (the kernel fills the PMD's ring frame before it
 * queues the byte) or filed by whoever holds the lock. A packet after that
 * leaves a byte, and ppoll() returns at once. */
void esd_l2port_idle_wait(struct l2port *p, struct l2slot *s, int64_t timeout_ns)
{
	if (s->wake_fd == -1 && (s->wake_fd = wake_socket(p->name, s)) < 0) {
		ESD_DBG("transport", "dpdk: no wake socket on %s (%s): link %u polls", p->name,
		        strerror(errno), (unsigned)s->link);
		s->wake_fd = -2;
	}
	if (s->wake_fd < 0) {
		esd_l2port_poll(p);
		esd_sleep_ns(timeout_ns < L2_NOWAKE_NS ? timeout_ns : L2_NOWAKE_NS);
		return;
	}
	drain(s->wake_fd);
	while (poll_port(p, true) == POLL_BURST)
		; /* every packet that came: this link's may be behind others' */
	if (!ring_empty(&s->rx))
		return;
	struct pollfd pfd = {.fd = s->wake_fd, .events = POLLIN};
	struct timespec ts = {.tv_sec = timeout_ns / 1000000000, .tv_nsec = timeout_ns % 1000000000};
	(void)ppoll(&pfd, 1, &ts, NULL);
}

uint16_t esd_l2port_tx(struct l2port *p, struct rte_mbuf **ms, uint16_t n)
{
	pthread_mutex_lock(&p->tx_lock);
	uint16_t sent = rte_eth_tx_burst(p->port, 0, ms, n);
	pthread_mutex_unlock(&p->tx_lock);
	return sent;
}
