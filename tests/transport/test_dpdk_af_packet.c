/* dpdk net_af_packet between two processes over a veth pair inside a
 * network namespace this test creates (no traffic leaves it): HELLO, a
 * push and pulls larger than a packet, the reliable layer on. Skips (77)
 * without DPDK, without the right to create a namespace, or without the
 * ip tool. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct peer peer_a;

static void test_af_packet_round_trips(void **state)
{
	(void)state;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.backend = "dpdk";
	o.dpdk_vdev = "af_packet";
	o.dpdk_mtu = 1400; /* veth MTU 1500 */
	o.addr = "esdv1";
	int rc = esd_link_connect(&o, &l);
	if (rc == -ENODEV) {
		peer_kill(&peer_a);
		ESD_TEST_SKIP("EAL could not start in the test process");
	}
	assert_int_equal(rc, 0);
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 2, .job_token = 9};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_HELLO, 5 * ESD_NS_PER_S), 0);
	assert_int_equal(m.u.hello.job_token, 9);

	enum { NKEYS = 256 }; /* 20 KiB responses: ~15 packets each */
	esd_key_t keys[NKEYS];
	float g[PEER_DIM];
	for (uint32_t i = 0; i < NKEYS; i++)
		keys[i] = 5000 + i;
	for (uint32_t j = 0; j < PEER_DIM; j++)
		g[j] = 1.5f;
	struct esd_rows_enc e;
	struct esd_rows r = {.iteration = 0,
	                     .sequence = 0,
	                     .worker = 2,
	                     .kind = ESD_XFER_UPDATE_PUSH,
	                     .dim = PEER_DIM};
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &r), 0);
	for (uint32_t i = 0; i < NKEYS; i++)
		assert_int_equal(esd_enc_row(&e, keys[i], 0, g, NULL), 0);
	esd_enc_rows_end(&e);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
	assert_int_equal(m.u.ack.status, 0);
	for (uint64_t rq = 0; rq < 4; rq++)
		assert_int_equal(esd_enc_pull(&b, 1, rq, 2, keys, NKEYS), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	for (uint64_t rq = 0; rq < 4; rq++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.sequence, rq);
		struct esd_row_view v;
		esd_rows_get(&m.u.rows, NKEYS - 1, &v);
		assert_float_equal(v.value[2], peer_init_value(keys[NKEYS - 1], 2) + 1.5f, 1e-4);
	}
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	printf("# af_packet: %llu retransmissions, %llu duplicates dropped\n",
	       (unsigned long long)st.retx_frames, (unsigned long long)st.dup_rx_frames);
	esd_link_close(l);
	peer_stop(&peer_a);
	esd_buf_free(&b);
}

int main(void)
{
	const char *why;
	if (esd_transport_backend_check("dpdk", &why))
		ESD_TEST_SKIP("dpdk backend: %s", why);
	/* A namespace of our own: the veth pair and its traffic stay in it. */
	if (unshare(CLONE_NEWNET))
		ESD_TEST_SKIP("cannot create a network namespace: %s", strerror(errno));
	if (system("ip link add esdv0 type veth peer name esdv1 && ip link set esdv0 up && "
	           "ip link set esdv1 up") != 0)
		ESD_TEST_SKIP("cannot create a veth pair (ip tool or veth missing)");
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.backend = "dpdk";
	o.dpdk_vdev = "af_packet";
	o.dpdk_mtu = 1400;
	o.addr = "esdv0";
	int rc = peer_start(&peer_a, &o);
	if (rc)
		ESD_TEST_SKIP("dpdk af_packet peer could not start: %s", esd_strerror(rc));
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_af_packet_round_trips)};
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	peer_kill(&peer_a);
	return rc ? 1 : 0;
}
