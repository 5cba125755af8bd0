/* dpdk net_af_packet between two processes over a veth pair inside a
 * network namespace this test creates (no traffic leaves it): HELLO, a
 * push and pulls larger than a packet, the reliable layer on, each side
 * given the other's MAC address (the job's ps.dpdk_*_macs); a client that
 * names another station is not answered; a dpdk_mtu above the interface's
 * is refused at connect; the packets go through each interface's qdisc
 * (tc shapes them, as any socket's). Skips (77) without DPDK, without the right to
 * create a namespace, or without the ip tool. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static struct peer peer_a;
static uint8_t mac_v0[1][6], mac_v1[1][6]; /* esdv0 (the peer's), esdv1 */

/* The MAC address of a Linux interface (of this network namespace: sysfs
 * shows the one it was mounted in). */
static int iface_mac(const char *iface, uint8_t mac[6])
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", iface);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int rc = ioctl(fd, SIOCGIFHWADDR, &ifr) ? -errno : 0;
	close(fd);
	memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	return rc;
}

/* Bytes the root qdisc of iface sent (tc -s), or -1. */
static long long qdisc_sent(const char *iface)
{
	char cmd[96], line[256];
	snprintf(cmd, sizeof(cmd), "tc -s qdisc show dev %s 2>/dev/null", iface);
	FILE *f = popen(cmd, "r");
	long long sent = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sent < 0 && sscanf(line, " Sent %lld bytes", &sent) != 1)
			sent = -1;
	if (f)
		pclose(f);
	return sent;
}

/* The client's options on esdv1, its peer's MAC given. */
static void client_opts(struct esd_link_opts *o, const uint8_t (*peer_mac)[6])
{
	peer_af_packet_opts(o, "esdv1");
	o->dpdk_peer_macs = peer_mac;
	o->dpdk_npeer_macs = 1;
}

static void test_mtu_above_interface(void **state)
{
	(void)state;
	struct esd_link_opts o;
	struct esd_link *l = NULL;
	client_opts(&o, mac_v0);
	o.dpdk_mtu = 1490; /* 1490 + 16 > 1500 */
	int rc = esd_link_connect(&o, &l);
	if (rc == -ENODEV)
		ESD_TEST_SKIP("EAL could not start in the test process");
	assert_int_equal(rc, -EINVAL);
	assert_null(l);
}

/* A client whose packets go to another station: the peer never sees them. */
static void test_other_station_ignored(void **state)
{
	(void)state;
	static const uint8_t elsewhere[1][6] = {{0x02, 0, 0, 0, 0, 0x99}};
	struct esd_link_opts o;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	client_opts(&o, elsewhere);
	o.timeout_ns = ESD_NS_PER_S;
	assert_int_equal(esd_link_connect(&o, &l), 0);
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 1, .job_token = 9};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_not_equal(peer_expect(l, &m, ESD_OP_HELLO, ESD_NS_PER_S), 0);
	esd_link_close(l);
	esd_buf_free(&b);
}

/* The peer stopped for 60 ms (SIGSTOP), as a stalled host would be. */
static void *stop_peer_60ms(void *arg)
{
	(void)arg;
	kill(peer_a.pid, SIGSTOP);
	esd_sleep_ns(60 * ESD_NS_PER_MS);
	kill(peer_a.pid, SIGCONT);
	return NULL;
}

/* n pushes of the keys sent at once through the client's end shaped to
 * rate (the peer stopped 60 ms meanwhile if stall), every ACK awaited, in
 * at most limit_ns; the retransmissions it took. */
static uint64_t push_burst(struct esd_link *l, struct esd_rows_enc *e, struct esd_buf *b,
                           struct esd_rows *r, const esd_key_t *keys, uint32_t nkeys,
                           const float *g, const char *rate, uint32_t n, bool stall,
                           int64_t limit_ns)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "tc qdisc change dev esdv1 root tbf rate %s burst 64kb latency 1s",
	         rate);
	assert_int_equal(system(cmd), 0);
	struct esd_link_stats st;
	struct esd_msg m;
	esd_link_stats(l, &st);
	uint64_t retx0 = st.retx_frames;
	int64_t t0 = esd_now_ns();
	pthread_t stopper;
	if (stall)
		assert_int_equal(pthread_create(&stopper, NULL, stop_peer_60ms, NULL), 0);
	for (uint32_t q = 0; q < n; q++) {
		r->sequence = 1000 * (stall ? 2 : 1) + q;
		assert_int_equal(esd_enc_rows_begin(e, b, ESD_OP_PUSH_GRAD, r), 0);
		for (uint32_t i = 0; i < nkeys; i++)
			assert_int_equal(esd_enc_row(e, keys[i], 0, g, NULL), 0);
		esd_enc_rows_end(e);
		assert_int_equal(peer_send_buf(l, b), 0);
	}
	if (stall)
		pthread_join(stopper, NULL);
	for (uint32_t q = 0; q < n; q++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, limit_ns), 0);
		assert_int_equal(m.u.ack.status, 0);
	}
	int64_t took = esd_now_ns() - t0;
	esd_link_stats(l, &st);
	printf("# %u pushes at once at %s%s: %.0f ms, %llu retransmissions\n", n, rate,
	       stall ? ", the peer stopped 60 ms" : "", esd_ns_to_ms(took),
	       (unsigned long long)(st.retx_frames - retx0));
	assert_true(took < limit_ns);
	return st.retx_frames - retx0;
}

static void test_af_packet_round_trips(void **state)
{
	(void)state;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	struct esd_link_opts o;
	client_opts(&o, mac_v0);
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
	/* both ways through the qdiscs main() put on the pair: the pulls'
	 * answers alone are 4 x 20 KiB (the PMD bypasses the qdisc unless
	 * told, and tc's shaping would not apply) */
	long long up = qdisc_sent("esdv1"), down = qdisc_sent("esdv0");
	printf("# qdisc sent: %lld bytes from the client, %lld from the peer\n", up, down);
	assert_true(up >= 20 * 1024);
	assert_true(down >= 4 * 20 * 1024);
	/* a queue: the client's end slowed to 100 Mbit/s and 160 pushes
	 * (3.2 MB, more packets than the PMD's ring holds) sent at once, so the
	 * last waits some 250 ms, twelve times the 20 ms timeout, while the
	 * acknowledgements of those ahead keep coming: next to nothing is sent
	 * twice (a sanitizer build's peer, slower, may drop a few packets from
	 * its ring; each costs a timeout of the queue's round trip) */
	uint64_t retx =
	    push_burst(l, &e, &b, &r, keys, NKEYS, g, "100mbit", 160, false, 20 * ESD_NS_PER_S);
	assert_true(retx <= 8);
	/* a burst of losses: 320 pushes at 2 Gbit/s while the peer is stopped
	 * for 60 ms, so its ring overflows and a run of frames is lost; each is
	 * sent again about once, a round trip apart, and all are through in
	 * well under a second (a timer per frame from its sending, judged
	 * before the acknowledgements that came, sent whole windows again and
	 * never got through) */
	retx = push_burst(l, &e, &b, &r, keys, NKEYS, g, "2gbit", 320, true, 2 * ESD_NS_PER_S);
	assert_true(retx < 320);
	/* idle, it sleeps until the port files a packet for it: woken by its
	 * link checks and the peer's keepalives (polling between sleeps of up
	 * to 200 us: over a thousand times) */
	long sleeps = peer_idle_sleeps(l, 300 * ESD_NS_PER_MS);
	assert_true(sleeps >= 0 && sleeps < 100);
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
	if (system("tc qdisc add dev esdv0 root tbf rate 1gbit burst 1mb latency 1s && "
	           "tc qdisc add dev esdv1 root tbf rate 1gbit burst 1mb latency 1s") != 0) {
		fprintf(stderr, "test_dpdk_af_packet: tc cannot add a tbf qdisc (iproute2's tc, "
		        "sch_tbf)\n");
		return 1;
	}
	if (iface_mac("esdv0", mac_v0[0]) || iface_mac("esdv1", mac_v1[0]))
		ESD_TEST_SKIP("cannot read the veth pair's MAC addresses");
	struct esd_link_opts o;
	peer_af_packet_opts(&o, "esdv0");
	o.dpdk_peer_macs = mac_v1; /* the only client it takes */
	o.dpdk_npeer_macs = 1;
	int rc = peer_start(&peer_a, &o);
	if (rc)
		ESD_TEST_SKIP("dpdk af_packet peer could not start: %s", esd_strerror(rc));
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_mtu_above_interface),
	                                   cmocka_unit_test(test_other_station_ignored),
	                                   cmocka_unit_test(test_af_packet_round_trips)};
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	peer_kill(&peer_a);
	return rc ? 1 : 0;
}
