/* dpdk memif between two processes (this test and a forked peer), each
 * with its own EAL (--no-pci --no-huge): HELLO, pushes, pulls larger than
 * a packet (fragmented, reassembled), no reliable layer (memif loses
 * nothing) and none of its retransmissions, accounting, the orderly
 * LINK_BYE shutdown, a link with faults injected (the reliable layer on,
 * on both sides), and a link with a job key (the handshake and tagged
 * frames; another key refused). Skips (77) when the backend is not
 * built or the EAL cannot start here. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static char sock[256], sock2[300], sock3[300];
static const struct esd_key job_key = {{7, 7, 7, 1}};
/* Both peers are forked before this process starts its EAL (a child forked
 * after that could not use DPDK). */
static struct peer peer_a, peer_b, peer_c;
static int peers_rc;

static void memif_opts(struct esd_link_opts *o, const char *addr, uint32_t id)
{
	esd_link_opts_init(o);
	o->backend = "dpdk";
	o->addr = addr;
	o->memif_id = id;
}

static void test_memif_round_trips(void **state)
{
	(void)state;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	struct esd_link_opts o;
	memif_opts(&o, sock, 0);
	int rc = esd_link_connect(&o, &l);
	if (rc == -ENODEV) {
		peer_kill(&peer_a);
		peer_kill(&peer_b);
		ESD_TEST_SKIP("EAL could not start in the test process");
	}
	assert_int_equal(rc, 0);
	assert_string_equal(esd_link_backend(l), "dpdk");
	esd_buf_init(&b);

	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 0, .job_token = 7};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_HELLO, 5 * ESD_NS_PER_S), 0);
	assert_int_equal(m.u.hello.job_token, 7);

	enum { NKEYS = 2048 }; /* a 150 KiB response: ~19 packets */
	static esd_key_t keys[NKEYS];
	for (uint32_t i = 0; i < NKEYS; i++)
		keys[i] = i;
	struct esd_rows_enc e;
	struct esd_rows r = {.iteration = 0,
	                     .sequence = 0,
	                     .worker = 0,
	                     .kind = ESD_XFER_UPDATE_PUSH,
	                     .dim = PEER_DIM};
	float g[PEER_DIM];
	for (uint32_t j = 0; j < PEER_DIM; j++)
		g[j] = 2.0f;
	assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &r), 0);
	for (uint32_t i = 0; i < NKEYS; i++)
		assert_int_equal(esd_enc_row(&e, keys[i], 0, g, NULL), 0);
	esd_enc_rows_end(&e);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
	assert_int_equal(m.u.ack.status, 0);

	for (uint64_t rq = 0; rq < 8; rq++)
		assert_int_equal(esd_enc_pull(&b, 1, rq, 0, keys, NKEYS), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	for (uint64_t rq = 0; rq < 8; rq++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.sequence, rq);
		assert_int_equal(m.u.rows.count, NKEYS);
		for (uint32_t i = 0; i < NKEYS; i += 511) {
			struct esd_row_view v;
			esd_rows_get(&m.u.rows, i, &v);
			assert_float_equal(v.value[1], peer_init_value(i, 1) + 2.0f, 1e-4);
		}
	}
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	assert_false(st.reliable); /* memif loses nothing */
	assert_int_equal(st.retx_frames, 0);
	/* idle, it sleeps on its doorbell: woken by its 10 ms link checks
	 * only (polling between sleeps of up to 1 ms, about 300 times) */
	long sleeps = peer_idle_sleeps(l, 300 * ESD_NS_PER_MS);
	assert_true(sleeps >= 0 && sleeps < 100);
	assert_int_equal(st.kind[ESD_XFER_UPDATE_PUSH].tx_rows, NKEYS);
	assert_int_equal(st.kind[ESD_XFER_MISS_PULL].rx_rows, 8 * NKEYS);
	printf("# memif: %llu wire bytes sent, %llu retransmissions\n",
	       (unsigned long long)st.wire_tx_bytes, (unsigned long long)st.retx_frames);
	int64_t t0 = esd_now_ns();
	esd_link_close(l); /* LINK_BYE handshake; the peer answers, then removes */
	printf("# close took %.1f ms\n", esd_ns_to_ms(esd_now_ns() - t0));

	/* Second link (memif id 1) with drop 2 %, dup 5 %, reorder 25 %: every
	 * push applied once, every pull answered, in order. The random drops
	 * may all hit acknowledgements (which frames are acks depends on
	 * timing): the 7th data frame is lost for sure. */
	o.memif_id = 1;
	o.faults = (struct esd_fault_opts){
	    .drop = 0.02, .dup = 0.05, .reorder = 0.25, .seed = 5, .drop_seq = 7};
	o.rto_ns = 5 * ESD_NS_PER_MS;
	assert_int_equal(esd_link_connect(&o, &l), 0);
	float sum = 0;
	for (uint64_t it = 1; it <= 30; it++) {
		for (uint64_t s = 0; s < 4; s++) {
			struct esd_rows gr = {.iteration = it,
			                      .sequence = (it - 1) * 4 + s + 1, /* as esdd */
			                      .worker = 1,
			                      .kind = ESD_XFER_UPDATE_PUSH,
			                      .dim = PEER_DIM};
			assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &gr), 0);
			assert_int_equal(esd_enc_row(&e, 77777, 0, g, NULL), 0);
			esd_enc_rows_end(&e);
			sum += 2.0f;
		}
		esd_key_t k = 77777;
		assert_int_equal(esd_enc_pull(&b, it, it, 1, &k, 1), 0);
		assert_int_equal(peer_send_buf(l, &b), 0);
		for (uint64_t s = 0; s < 4; s++) {
			assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
			assert_int_equal(m.u.ack.sequence, (it - 1) * 4 + s + 1);
			assert_int_equal(m.u.ack.status, 0);
		}
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		struct esd_row_view v;
		esd_rows_get(&m.u.rows, 0, &v);
		assert_float_equal(v.value[0], peer_init_value(77777, 0) + sum, 1e-3);
	}
	esd_link_stats(l, &st);
	printf("# memif with faults: drops %llu dups %llu reorders %llu, retransmitted %llu\n",
	       (unsigned long long)st.fault_drops, (unsigned long long)st.fault_dups,
	       (unsigned long long)st.fault_reorders, (unsigned long long)st.retx_frames);
	assert_true(st.fault_reorders > 0);
	assert_true(st.reliable); /* faults turn it on, here and at the peer */
	assert_true(st.retx_frames > 0);
	esd_link_close(l);
	peer_stop(&peer_a);
	esd_buf_free(&b);
}

/* A peer killed with SIGKILL: the memif link goes down and recv says so
 * within a second; this process does not crash. */
static void test_memif_peer_crash(void **state)
{
	(void)state;
	struct esd_link *l;
	struct esd_msg m;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.backend = "dpdk";
	o.addr = sock2;
	assert_int_equal(esd_link_connect(&o, &l), 0);
	peer_kill(&peer_b);
	int64_t t0 = esd_now_ns();
	int rc = esd_link_recv(l, &m, 3 * ESD_NS_PER_S);
	int64_t dt = esd_now_ns() - t0;
	printf("# peer killed: recv %s after %.1f ms (%s)\n", esd_strerror(rc), esd_ns_to_ms(dt),
	       esd_link_last_error(l));
	assert_int_equal(rc, -ECONNRESET);
	assert_true(dt < ESD_NS_PER_S);
	esd_link_close(l);
}

/* A keyed memif link: pulls of many packets each, tagged and checked. */
static void test_memif_keyed(void **state)
{
	struct esd_link_opts o;
	memif_opts(&o, sock3, 0);
	struct esd_key other = job_key;
	other.b[31] = 1;
	o.key = &other;
	(void)state;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	o.timeout_ns = 2 * ESD_NS_PER_S;
	assert_int_equal(esd_link_connect(&o, &l), -EACCES);
	o.key = &job_key;
	o.memif_id = 1;
	assert_int_equal(esd_link_connect(&o, &l), 0);
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 1, .job_token = 9};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_HELLO, 5 * ESD_NS_PER_S), 0);
	enum { NKEYS = 2048 };
	static esd_key_t keys[NKEYS];
	for (uint32_t i = 0; i < NKEYS; i++)
		keys[i] = i;
	for (uint64_t r = 0; r < 20; r++) {
		assert_int_equal(esd_enc_pull(&b, 1, r, 1, keys, NKEYS), 0);
		assert_int_equal(peer_send_buf(l, &b), 0);
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.count, NKEYS);
	}
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	assert_false(st.reliable);
	printf("# keyed memif: 20 pulls of %u rows, %llu wire bytes sent\n", NKEYS,
	       (unsigned long long)st.wire_tx_bytes);
	esd_link_close(l);
	esd_buf_free(&b);
}

int main(void)
{
	const char *why;
	if (esd_transport_backend_check("dpdk", &why))
		ESD_TEST_SKIP("dpdk backend: %s", why);
	snprintf(sock, sizeof(sock), "/tmp/esd-memif-test-%d.sock", (int)getpid());
	snprintf(sock2, sizeof(sock2), "%s.crash", sock);
	snprintf(sock3, sizeof(sock3), "%s.keyed", sock);
	unlink(sock);
	unlink(sock2);
	unlink(sock3);
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.backend = "dpdk";
	o.addr = sock;
	o.max_links = 2;
	if ((peers_rc = peer_start(&peer_a, &o)))
		ESD_TEST_SKIP("dpdk peer could not start (EAL or memif unavailable here): %s",
		              esd_strerror(peers_rc));
	o.addr = sock2;
	o.max_links = 1;
	if ((peers_rc = peer_start(&peer_b, &o))) {
		peer_kill(&peer_a);
		ESD_TEST_SKIP("second dpdk peer could not start: %s", esd_strerror(peers_rc));
	}
	o.addr = sock3;
	o.max_links = 2;
	o.key = &job_key;
	if ((peers_rc = peer_start(&peer_c, &o))) {
		peer_kill(&peer_a);
		peer_kill(&peer_b);
		ESD_TEST_SKIP("third dpdk peer could not start: %s", esd_strerror(peers_rc));
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_memif_round_trips),
	    cmocka_unit_test(test_memif_keyed),
	    cmocka_unit_test(test_memif_peer_crash),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	peer_kill(&peer_a);
	peer_kill(&peer_b);
	peer_kill(&peer_c);
	unlink(sock);
	unlink(sock2);
	unlink(sock3);
	return rc ? 1 : 0;
}
