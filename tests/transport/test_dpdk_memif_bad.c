/* Bad packets on a memif link: memif loses nothing, so a link runs there
 * without the reliable layer, and a packet that cannot belong to the frame
 * being reassembled (a fragment out of order, a runt, another ethertype, a
 * new frame before the last one ended) is the peer's fault: the link
 * fails with -EPROTO and a message naming what came and from where,
 * instead of dropping it and waiting for a frame that never completes.
 * The bad peer is a raw memif client port of this process, written to
 * with rte_eth_tx_burst(). Skips (77) when the EAL cannot start. */
#include "testutil.h"

#include "dpdk_internal.h"

#include <esd/clock.h>
#include <esd/err.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

static char sock[128];
static struct esd_listener *ls;
static struct rte_mempool *raw_pool;

/* A raw memif client port on memif id of the listener's socket, up. */
static int raw_port(uint32_t id, uint16_t *port, char *name, size_t len)
{
	char spec[400];
	snprintf(name, len, "net_memif_rawbad%u", id);
	snprintf(spec, sizeof(spec), "%s,role=client,socket=%s,id=%u,bsize=16384,rsize=8", name,
	         sock, id);
	if (rte_dev_probe(spec) || rte_eth_dev_get_port_by_name(name, port))
		return -1;
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	if (rte_eth_dev_configure(*port, 1, 1, &conf) < 0 ||
	    rte_eth_rx_queue_setup(*port, 0, 256, (unsigned)rte_socket_id(), NULL, raw_pool) < 0 ||
	    rte_eth_tx_queue_setup(*port, 0, 256, (unsigned)rte_socket_id(), NULL) < 0 ||
	    rte_eth_dev_start(*port) < 0)
		return -1;
	return 0;
}

/* Down in the EAL's interrupt thread, as the backend's own devices go:
 * there it cannot race memif's handling of the listener side's leaving. */
static void raw_port_down(uint16_t port, const char *name)
{
	esd_dpdk_port_down(port, name);
}

/* Send len bytes as one packet. */
static void tx_bytes(uint16_t port, const uint8_t *p, size_t len)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(raw_pool);
	assert_non_null(m);
	uint8_t *b = (uint8_t *)rte_pktmbuf_append(m, (uint16_t)len);
	assert_non_null(b);
	memcpy(b, p, len);
	for (int i = 0; i < 1000 && !rte_eth_tx_burst(port, 0, &m, 1); i++)
		esd_sleep_ns(ESD_NS_PER_MS);
}

/* The headers: Ethernet of ethertype type, fragment (id, off, total). */
static void headers(uint8_t *p, uint16_t type, uint32_t id, uint32_t off, uint32_t total)
{
	memset(p, 0xff, 6);
	memset(p + 6, 0x02, 6);
	p[12] = (uint8_t)(type >> 8);
	p[13] = (uint8_t)type;
	struct frag_hdr f = {.id = id, .off = off, .total = total};
	esd_frag_hdr_put(p + ETH_HDR, &f);
}

/* A packet of len bytes (len < 30: cut short), payload 0x5a. */
static void send_packet(uint16_t port, uint16_t type, uint32_t id, uint32_t off,
                        uint32_t total, size_t len)
{
	uint8_t full[ETH_HDR + FRAG_HDR + 64];
	memset(full, 0x5a, sizeof(full));
	headers(full, type, id, off, total);
	tx_bytes(port, full, len < sizeof(full) ? len : sizeof(full));
}

/* A valid first fragment: the frame header of a HELLO, whose body never
 * follows. */
static void send_first(uint16_t port, uint32_t id)
{
	struct esd_buf b;
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 0, .job_token = 1};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	uint8_t pkt[ETH_HDR + FRAG_HDR + ESD_FRAME_HDR_SIZE];
	headers(pkt, ETHERTYPE_ESD, id, 0, (uint32_t)b.len);
	memcpy(pkt + ETH_HDR + FRAG_HDR, b.data, ESD_FRAME_HDR_SIZE);
	tx_bytes(port, pkt, sizeof(pkt));
	esd_buf_free(&b);
}

enum bad { OUT_OF_ORDER, RUNT, OTHER_TYPE, NEW_FRAME };

/* One link (memif id) gets the bad packet: recv fails with -EPROTO and
 * the reason. */
static void one_case(uint32_t id, enum bad what, const char *want)
{
	uint16_t port;
	char name[64];
	assert_int_equal(raw_port(id, &port, name, sizeof(name)), 0);
	struct esd_link *l;
	assert_int_equal(esd_listener_accept(ls, 5 * ESD_NS_PER_S, &l), 0);
	switch (what) {
	case OUT_OF_ORDER:
		send_packet(port, ETHERTYPE_ESD, 1, 4096, 8192, ETH_HDR + FRAG_HDR + 64);
		break;
	case RUNT:
		send_packet(port, ETHERTYPE_ESD, 1, 0, 0, 10);
		break;
	case OTHER_TYPE:
		send_packet(port, 0x0800, 1, 0, 0, ETH_HDR + FRAG_HDR + 64);
		break;
	case NEW_FRAME:
		send_first(port, 1);
		send_first(port, 2);
		break;
	}
	struct esd_msg m;
	int64_t t0 = esd_now_ns();
	int rc = esd_link_recv(l, &m, 5 * ESD_NS_PER_S);
	printf("# %s: recv %s after %.1f ms (%s)\n", want, esd_strerror(rc),
	       esd_ns_to_ms(esd_now_ns() - t0), esd_link_last_error(l));
	assert_int_equal(rc, -EPROTO);
	assert_non_null(strstr(esd_link_last_error(l), want));
	assert_non_null(strstr(esd_link_last_error(l), sock)); /* where it came from */
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	assert_false(st.reliable);
	/* the bad peer goes first; the failed link then sees it gone */
	raw_port_down(port, name);
	esd_link_close(l);
}

static void test_bad_packets(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.backend = "dpdk";
	o.addr = sock;
	o.max_links = 4;
	int rc = esd_listener_open(&o, &ls);
	if (rc == -ENODEV || rc == -ENOTSUP)
		ESD_TEST_SKIP("the dpdk backend or its EAL is not available here");
	assert_int_equal(rc, 0);
	raw_pool = rte_pktmbuf_pool_create("rawbad", 1023, 0, 0,
	                                   RTE_PKTMBUF_HEADROOM + 16384, (int)rte_socket_id());
	assert_non_null(raw_pool);
	one_case(0, OUT_OF_ORDER, "a fragment out of order");
	one_case(1, RUNT, "a runt packet");
	one_case(2, OTHER_TYPE, "a packet of another ethertype");
	one_case(3, NEW_FRAME, "a new frame before the last one ended");
	esd_listener_close(ls);
}

int main(void)
{
	snprintf(sock, sizeof(sock), "/tmp/esd-memif-bad-%d.sock", (int)getpid());
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_packets),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(sock);
	return rc;
}
