/* The peer addressing of dpdk links over an Ethernet segment (af_packet, a
 * NIC by PCI address; transport/dpdk_l2.c): which packets a link takes,
 * where it sends, what it learns; and the interface MTU check. No EAL. */
#include "testutil.h"

#include "dpdk_internal.h"

#include <errno.h>
#include <string.h>

static const uint8_t own[6] = {0x02, 0, 0, 0, 0, 0x01};
static const uint8_t peer_a[6] = {0x02, 0, 0, 0, 0, 0x0a};
static const uint8_t peer_b[6] = {0x02, 0, 0, 0, 0, 0x0b};
static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

/* An Ethernet header from src to dst. */
static const uint8_t *hdr(const uint8_t dst[6], const uint8_t src[6])
{
	static uint8_t h[14];
	memcpy(h, dst, 6);
	memcpy(h + 6, src, 6);
	return h;
}

static void test_learned(void **state)
{
	(void)state;
	struct esd_link_opts o;
	struct l2_peer p;
	uint8_t dst[6];
	esd_link_opts_init(&o);
	assert_int_equal(l2_peer_init(&p, &o, false), 0);
	l2_peer_dst(&p, dst);
	assert_memory_equal(dst, bcast, 6); /* nobody known yet */
	assert_false(l2_peer_take(&p, own, hdr(peer_b, peer_a))); /* to another station */
	assert_true(l2_peer_take(&p, own, hdr(bcast, peer_a)));   /* the first: learned */
	l2_peer_dst(&p, dst);
	assert_memory_equal(dst, peer_a, 6);
	assert_true(l2_peer_take(&p, own, hdr(own, peer_a)));
	assert_false(l2_peer_take(&p, own, hdr(bcast, peer_b))); /* another link's node */
	l2_peer_fini(&p);
}

static void test_from_options(void **state)
{
	(void)state;
	static const uint8_t macs[2][6] = {{0x02, 0, 0, 0, 0, 0x0a}, {0x02, 0, 0, 0, 0, 0x0b}};
	struct esd_link_opts o;
	struct l2_peer p;
	uint8_t dst[6];
	esd_link_opts_init(&o);
	o.dpdk_peer_macs = macs;
	o.dpdk_npeer_macs = 1;
	/* a client: sends to its peer at once, takes nothing from others */
	assert_int_equal(l2_peer_init(&p, &o, true), 0);
	l2_peer_dst(&p, dst);
	assert_memory_equal(dst, peer_a, 6);
	assert_false(l2_peer_take(&p, own, hdr(own, peer_b)));
	assert_true(l2_peer_take(&p, own, hdr(own, peer_a)));
	l2_peer_fini(&p);
	/* a listener: takes the first packet of an allowed source only */
	static const uint8_t stranger[6] = {0x02, 0, 0, 0, 0, 0x0c};
	o.dpdk_npeer_macs = 2;
	assert_int_equal(l2_peer_init(&p, &o, false), 0);
	assert_false(l2_peer_take(&p, own, hdr(bcast, stranger)));
	l2_peer_dst(&p, dst);
	assert_memory_equal(dst, bcast, 6);
	assert_true(l2_peer_take(&p, own, hdr(bcast, peer_b)));
	assert_false(l2_peer_take(&p, own, hdr(bcast, peer_a))); /* the link is peer_b's */
	l2_peer_dst(&p, dst);
	assert_memory_equal(dst, peer_b, 6);
	l2_peer_fini(&p);
}

static void test_iface_mtu(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	assert_int_equal(dpdk_ring_size(&o), 1024);
	o.dpdk_queue = 256;
	assert_int_equal(dpdk_ring_size(&o), 256);
	assert_int_equal(dpdk_iface_mtu_check("lo", 1416), 0);
	assert_int_equal(dpdk_iface_mtu_check("esd-no-such", 1416), -ENODEV);
	assert_int_equal(dpdk_iface_mtu_check("lo", 1u << 20), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_learned),
		cmocka_unit_test(test_from_options),
		cmocka_unit_test(test_iface_mtu),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
