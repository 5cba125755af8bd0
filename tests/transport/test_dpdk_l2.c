/* One port, many links (transport/dpdk_port.c): which link of a shared
 * af_packet or NIC port a packet belongs to, how a listener's links start,
 * end and start over, what a client learns; the packet header; and the
 * interface MTU check (dpdk_l2.c). No EAL. */
#include "testutil.h"

#include "dpdk_internal.h"

#include <errno.h>
#include <linux/filter.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const uint8_t own[6] = {0x02, 0, 0, 0, 0, 0x01};
static const uint8_t peer_a[6] = {0x02, 0, 0, 0, 0, 0x0a};
static const uint8_t peer_b[6] = {0x02, 0, 0, 0, 0, 0x0b};
static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

static const uint8_t stranger[6] = {0x02, 0, 0, 0, 0, 0x0c};

/* The headers of a packet from src to dst: link, channel and flags. */
static const uint8_t *pkt(const uint8_t dst[6], const uint8_t src[6], uint16_t link,
                          uint8_t channel, uint8_t flags)
{
	static uint8_t h[ETH_HDR + FRAG_HDR];
	memcpy(h, dst, 6);
	memcpy(h + 6, src, 6);
	h[12] = ETHERTYPE_ESD >> 8;
	h[13] = ETHERTYPE_ESD & 0xff;
	struct frag_hdr f = {.id = 7, .off = 0, .total = 100, .link = link, .channel = channel,
	                     .flags = flags};
	esd_frag_hdr_put(h + ETH_HDR, &f);
	return h;
}

static struct l2slot *route(struct l2tab *t, const uint8_t *h, bool *rst)
{
	bool r;
	struct l2slot *s = esd_l2tab_route(t, h, rst ? rst : &r);
	return s;
}

static void no_free(void *pkt)
{
	(void)pkt;
}

static void tab_init(struct l2tab *t)
{
	memset(t, 0, sizeof(*t));
	memcpy(t->own, own, 6);
}

static void tab_fini(struct l2tab *t)
{
	for (unsigned i = 0; i < L2_MAX_SLOTS; i++)
		if (t->slot[i])
			esd_l2tab_release(t, t->slot[i], no_free);
	for (unsigned i = 0; i < L2_MAX_LISTEN; i++)
		if (t->lis[i].on)
			esd_l2tab_unlisten(t, t->lis[i].channel, no_free);
}

static void test_header_round_trip(void **state)
{
	(void)state;
	uint8_t b[FRAG_HDR];
	struct frag_hdr f = {.id = 0x01020304, .off = 9000, .total = 70000, .link = 513,
	                     .channel = 3, .flags = FRAG_SYN},
	                g;
	esd_frag_hdr_put(b, &f);
	esd_frag_hdr_get(b, &g);
	assert_int_equal(g.id, f.id);
	assert_int_equal(g.off, f.off);
	assert_int_equal(g.total, f.total);
	assert_int_equal(g.link, 513);
	assert_int_equal(g.channel, 3);
	assert_int_equal(g.flags, FRAG_SYN);
	assert_int_equal(b[12], 513 & 0xff); /* little-endian, as the protocol */
}

/* One listener, several nodes: each (MAC, link id) its own link, started by
 * SYN, taken by accept in arrival order. */
static void test_listener_demux(void **state)
{
	(void)state;
	struct l2tab t;
	tab_init(&t);
	assert_int_equal(esd_l2tab_listen(&t, 0, 3, NULL, 0), 0);
	assert_int_equal(esd_l2tab_listen(&t, 0, 3, NULL, 0), -EADDRINUSE);
	assert_null(esd_l2tab_take(&t, 0));
	assert_null(route(&t, pkt(own, peer_a, 0, 0, 0), NULL)); /* no SYN: nobody's */
	struct l2slot *a = route(&t, pkt(bcast, peer_a, 0, 0, FRAG_SYN), NULL);
	assert_non_null(a);
	assert_ptr_equal(route(&t, pkt(own, peer_a, 0, 0, FRAG_SYN), NULL), a); /* a resend */
	struct l2slot *b = route(&t, pkt(own, peer_b, 0, 0, FRAG_SYN), NULL);
	struct l2slot *a1 = route(&t, pkt(own, peer_a, 1, 0, FRAG_SYN), NULL); /* its 2nd */
	assert_non_null(b);
	assert_non_null(a1);
	assert_true(a != b && a != a1 && b != a1);
	assert_memory_equal(a->mac, peer_a, 6);
	assert_true(a->server);
	assert_null(route(&t, pkt(own, stranger, 0, 0, FRAG_SYN), NULL)); /* max 3 */
	assert_null(route(&t, pkt(peer_b, peer_a, 0, 0, 0), NULL)); /* to another station */
	assert_null(route(&t, pkt(own, peer_a, 0, 1, FRAG_SYN), NULL)); /* no channel 1 */
	assert_ptr_equal(esd_l2tab_take(&t, 0), a);
	assert_int_equal(a->state, L2_TAKEN);
	assert_ptr_equal(esd_l2tab_take(&t, 0), b);
	assert_ptr_equal(esd_l2tab_take(&t, 0), a1);
	assert_null(esd_l2tab_take(&t, 0));
	assert_ptr_equal(route(&t, pkt(own, peer_b, 0, 0, 0), NULL), b);
	/* a packet the listener sent itself (af_packet sees its own) */
	assert_null(route(&t, pkt(peer_a, own, 0, 0, FRAG_FROM_SERVER), NULL));
	/* a link closed frees its place */
	esd_l2tab_release(&t, b, no_free);
	assert_non_null(route(&t, pkt(own, stranger, 0, 0, FRAG_SYN), NULL));
	tab_fini(&t);
}

/* A node that starts over (SYN after its link carried data) ends the old
 * link; a listener answers a packet of a link it does not know with RST. */
static void test_restart_and_reset(void **state)
{
	(void)state;
	struct l2tab t;
	bool rst;
	tab_init(&t);
	assert_int_equal(esd_l2tab_listen(&t, 2, 8, NULL, 0), 0);
	struct l2slot *a = route(&t, pkt(own, peer_a, 5, 2, FRAG_SYN), NULL);
	assert_ptr_equal(esd_l2tab_take(&t, 2), a);
	assert_ptr_equal(route(&t, pkt(own, peer_a, 5, 2, 0), NULL), a);
	assert_true(a->established);
	struct l2slot *a2 = route(&t, pkt(own, peer_a, 5, 2, FRAG_SYN), NULL);
	assert_non_null(a2);
	assert_true(a2 != a);
	assert_int_equal(a->state, L2_RESET);
	assert_int_equal(a2->state, L2_NEW);
	assert_ptr_equal(route(&t, pkt(own, peer_a, 5, 2, FRAG_SYN), NULL), a2);
	/* a first fragment of a link nobody knows: RST; a later one: dropped */
	assert_null(route(&t, pkt(own, peer_b, 9, 2, 0), &rst));
	assert_true(rst);
	static uint8_t later[ETH_HDR + FRAG_HDR];
	memcpy(later, pkt(own, peer_b, 9, 2, 0), sizeof(later));
	later[ETH_HDR + 4] = 1; /* offset 1 */
	assert_null(route(&t, later, &rst));
	assert_false(rst);
	assert_null(route(&t, pkt(own, peer_b, 9, 3, 0), &rst)); /* nobody listens on 3 */
	assert_false(rst);
	tab_fini(&t);
}

/* Clients: (channel, link id) each; the shard's MAC given or learned from
 * its first answer; RST from it ends the link. */
static void test_clients(void **state)
{
	(void)state;
	struct l2tab t;
	struct l2slot *c0, *c1, *dup;
	tab_init(&t);
	assert_int_equal(esd_l2tab_client(&t, 0, 4, NULL, &c0), 0);      /* shard 0, learned */
	assert_int_equal(esd_l2tab_client(&t, 1, 4, peer_b, &c1), 0);    /* shard 1, given */
	assert_int_equal(esd_l2tab_client(&t, 1, 4, NULL, &dup), -EADDRINUSE);
	assert_false(c0->mac_known);
	assert_true(c1->mac_known);
	/* a client's own packets, seen again on af_packet */
	assert_null(route(&t, pkt(bcast, own, 4, 0, FRAG_SYN), NULL));
	assert_null(route(&t, pkt(own, peer_a, 4, 1, FRAG_FROM_SERVER), NULL)); /* not c1's */
	assert_ptr_equal(route(&t, pkt(own, peer_b, 4, 1, FRAG_FROM_SERVER), NULL), c1);
	assert_null(route(&t, pkt(own, peer_a, 5, 0, FRAG_FROM_SERVER), NULL)); /* link 5 */
	assert_ptr_equal(route(&t, pkt(own, peer_a, 4, 0, FRAG_FROM_SERVER), NULL), c0);
	assert_true(c0->mac_known);
	assert_memory_equal(c0->mac, peer_a, 6);
	assert_null(route(&t, pkt(own, peer_b, 4, 0, FRAG_FROM_SERVER), NULL)); /* not its shard */
	assert_null(route(&t, pkt(own, peer_b, 4, 0, FRAG_FROM_SERVER | FRAG_RST), NULL));
	assert_int_equal(c0->state, L2_TAKEN); /* a stranger's RST changes nothing */
	assert_null(route(&t, pkt(own, peer_a, 4, 0, FRAG_FROM_SERVER | FRAG_RST), NULL));
	assert_int_equal(c0->state, L2_RESET);
	tab_fini(&t);
}

/* A listener with the job's worker MACs takes links from those only. */
static void test_allowed_macs(void **state)
{
	(void)state;
	static const uint8_t macs[2][6] = {{0x02, 0, 0, 0, 0, 0x0a}, {0x02, 0, 0, 0, 0, 0x0b}};
	struct l2tab t;
	bool rst;
	tab_init(&t);
	assert_int_equal(esd_l2tab_listen(&t, 0, 4, macs, 2), 0);
	assert_null(route(&t, pkt(bcast, stranger, 0, 0, FRAG_SYN), NULL));
	assert_null(route(&t, pkt(own, stranger, 0, 0, 0), &rst));
	assert_false(rst); /* no answer to a stranger */
	assert_non_null(route(&t, pkt(bcast, peer_a, 0, 0, FRAG_SYN), NULL));
	assert_non_null(route(&t, pkt(bcast, peer_b, 1, 0, FRAG_SYN), NULL));
	tab_fini(&t);
}

static void test_ring(void **state)
{
	(void)state;
	static struct l2ring r;
	static int x[L2_RING + 1];
	for (int i = 0; i < L2_RING; i++)
		assert_true(esd_l2ring_put(&r, &x[i]));
	assert_false(esd_l2ring_put(&r, &x[L2_RING])); /* full: dropped by the caller */
	for (int i = 0; i < L2_RING; i++)
		assert_ptr_equal(esd_l2ring_get(&r), &x[i]);
	assert_null(esd_l2ring_get(&r));
}

static void test_iface_mtu(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	assert_int_equal(esd_dpdk_ring_size(&o), 256); /* memif */
	o.dpdk_vdev = "af_packet";
	assert_int_equal(esd_dpdk_ring_size(&o), 1024);
	o.dpdk_vdev = "pci";
	assert_int_equal(esd_dpdk_ring_size(&o), 1024);
	o.dpdk_queue = 512;
	assert_int_equal(esd_dpdk_ring_size(&o), 512);
	o.dpdk_vdev = "memif";
	assert_int_equal(esd_dpdk_ring_size(&o), 512);
	assert_int_equal(esd_dpdk_iface_mtu_check("lo", 1416), 0);
	assert_int_equal(esd_dpdk_iface_mtu_check("esd-no-such", 1416), -ENODEV);
	assert_int_equal(esd_dpdk_iface_mtu_check("lo", 1u << 20), -EINVAL);
}

/* Whether the kernel, running s's wake filter on the packet with
 * headers h (a datagram socket runs it as a packet socket would, from
 * the first byte), passes it: one byte, or nothing. */
static bool wakes(const struct l2slot *s, const uint8_t *h)
{
	struct sock_filter prog[L2_WAKE_FILTER_MAX];
	struct sock_fprog fp = {.len = (unsigned short)esd_l2_wake_filter(s, prog), .filter = prog};
	assert_true(fp.len <= L2_WAKE_FILTER_MAX);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM, 0, sv), 0);
	assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_ATTACH_FILTER, &fp, sizeof(fp)), 0);
	uint8_t p[ETH_HDR + FRAG_HDR + 40] = {0}, b[sizeof(p)];
	memcpy(p, h, ETH_HDR + FRAG_HDR);
	assert_int_equal(send(sv[0], p, sizeof(p), 0), (ssize_t)sizeof(p));
	ssize_t n = recv(sv[1], b, sizeof(b), MSG_DONTWAIT);
	close(sv[0]);
	close(sv[1]);
	assert_true(n == 1 || (n < 0 && errno == EAGAIN));
	return n == 1;
}

/* A link's wake filter passes its own packets, keepalives excepted, and
 * no other link's: the other link id (0x0201: the byte order), channel,
 * direction, or (a server link) client. */
static void test_wake_filter(void **state)
{
	(void)state;
	struct l2slot client = {.server = false, .channel = 3, .link = 0x0102};
	assert_true(wakes(&client, pkt(own, peer_a, 0x0102, 3, FRAG_FROM_SERVER)));
	assert_true(wakes(&client, pkt(own, peer_b, 0x0102, 3, FRAG_FROM_SERVER | FRAG_RST)));
	assert_false(wakes(&client, pkt(own, peer_a, 0x0102, 3, FRAG_FROM_SERVER | FRAG_KEEPALIVE)));
	assert_false(wakes(&client, pkt(own, peer_a, 0x0201, 3, FRAG_FROM_SERVER)));
	assert_false(wakes(&client, pkt(own, peer_a, 0x0103, 3, FRAG_FROM_SERVER)));
	assert_false(wakes(&client, pkt(own, peer_a, 0x0102, 4, FRAG_FROM_SERVER)));
	assert_false(wakes(&client, pkt(own, peer_a, 0x0102, 3, 0)));

	struct l2slot server = {.server = true, .channel = 3, .link = 0x0102};
	memcpy(server.mac, peer_a, 6);
	assert_true(wakes(&server, pkt(own, peer_a, 0x0102, 3, 0)));
	assert_true(wakes(&server, pkt(bcast, peer_a, 0x0102, 3, FRAG_SYN)));
	assert_false(wakes(&server, pkt(own, peer_a, 0x0102, 3, FRAG_KEEPALIVE)));
	assert_false(wakes(&server, pkt(own, peer_b, 0x0102, 3, 0)));
	assert_false(wakes(&server, pkt(own, peer_a, 0x0201, 3, 0)));
	assert_false(wakes(&server, pkt(own, peer_a, 0x0102, 2, 0)));
	assert_false(wakes(&server, pkt(own, peer_a, 0x0102, 3, FRAG_FROM_SERVER)));
	uint8_t other[6] = {0x02, 0, 0, 0, 1, 0x0a}; /* the MAC's last two bytes match */
	assert_false(wakes(&server, pkt(own, other, 0x0102, 3, 0)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_round_trip),
		cmocka_unit_test(test_listener_demux),
		cmocka_unit_test(test_restart_and_reset),
		cmocka_unit_test(test_clients),
		cmocka_unit_test(test_allowed_macs),
		cmocka_unit_test(test_ring),
		cmocka_unit_test(test_iface_mtu),
		cmocka_unit_test(test_wake_filter),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
