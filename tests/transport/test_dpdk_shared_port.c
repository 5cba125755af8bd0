/* One af_packet port serving many links: a peer listens on one interface of
 * a bridge in a network namespace this test creates (no traffic leaves it);
 * clients reach it from two other interfaces of the bridge, two links on one
 * of them (link ids 1 and 2, one thread each, sharing that port) and one on
 * the other, all at once: HELLO, a push and pulls larger than a packet on
 * each, every answer the right link's. Then an address used again after
 * its link closed, and a second listener channel on the same interface
 * (two shards of one host) told apart. MACs are
 * learned, not given. Skips (77) without DPDK, without the right to create
 * a namespace, or without the ip tool. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct peer peer_a, peer_b; /* channel 0 and channel 1, both on esds */

static void client_opts(struct esd_link_opts *o, const char *iface, uint32_t id, uint32_t chan)
{
	peer_af_packet_opts(o, iface);
	o->memif_id = id;
	o->dpdk_channel = chan;
}

/* HELLO with worker w, a push of 256 rows, 4 pulls of them; 0 or a line. */
static const char *round_trips(struct esd_link *l, uint32_t w)
{
	struct esd_buf b;
	struct esd_msg m;
	const char *bad = NULL;
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = w, .job_token = 9};
	if (esd_enc_hello(&b, &h, 0) || peer_send_buf(l, &b) ||
	    peer_expect(l, &m, ESD_OP_HELLO, 5 * ESD_NS_PER_S)) {
		bad = "HELLO not answered";
		goto out;
	}
	enum { NKEYS = 256 }; /* 20 KiB responses: ~15 packets each */
	esd_key_t keys[NKEYS];
	float g[PEER_DIM];
	for (uint32_t i = 0; i < NKEYS; i++)
		keys[i] = 100000u * (w + 1) + i; /* each link its own rows */
	for (uint32_t j = 0; j < PEER_DIM; j++)
		g[j] = (float)w + 0.5f;
	struct esd_rows_enc e;
	struct esd_rows r = {.worker = w, .kind = ESD_XFER_UPDATE_PUSH, .dim = PEER_DIM};
	esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &r);
	for (uint32_t i = 0; i < NKEYS; i++)
		esd_enc_row(&e, keys[i], 0, g, NULL);
	esd_enc_rows_end(&e);
	if (peer_send_buf(l, &b) || peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S)) {
		bad = "PUSH not acknowledged";
		goto out;
	}
	for (uint64_t rq = 0; rq < 4; rq++)
		esd_enc_pull(&b, 1, rq, w, keys, NKEYS);
	if (peer_send_buf(l, &b)) {
		bad = "PULL not sent";
		goto out;
	}
	for (uint64_t rq = 0; rq < 4 && !bad; rq++) {
		if (peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S) ||
		    m.u.rows.sequence != rq) {
			bad = "PULL not answered in order";
			break;
		}
		struct esd_row_view v;
		esd_rows_get(&m.u.rows, NKEYS - 1, &v);
		float want = peer_init_value(keys[NKEYS - 1], 2) + (float)w + 0.5f;
		if (v.value[2] < want - 1e-3f || v.value[2] > want + 1e-3f)
			bad = "another link's rows";
	}
out:
	esd_buf_free(&b);
	return bad;
}

struct job {
	const char *iface;
	uint32_t id, worker, chan;
	const char *bad;
};

static void *client(void *arg)
{
	struct job *j = arg;
	struct esd_link_opts o;
	struct esd_link *l;
	client_opts(&o, j->iface, j->id, j->chan);
	if (esd_link_connect(&o, &l)) {
		j->bad = "connect failed";
		return NULL;
	}
	j->bad = round_trips(l, j->worker);
	esd_link_close(l);
	return NULL;
}

static void test_three_links_at_once(void **state)
{
	(void)state;
	struct job jobs[3] = {{"esdc1", 1, 1, 0, NULL}, {"esdc1", 2, 2, 0, NULL},
	                      {"esdc2", 1, 3, 0, NULL}};
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&t[i], NULL, client, &jobs[i]), 0);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		if (jobs[i].bad)
			fail_msg("link %d (%s id %u): %s", i, jobs[i].iface, jobs[i].id, jobs[i].bad);
	}
}

/* One address carries one link at a time in a process; once that link
 * closed, the same address starts a new one, which works. */
static void test_start_over(void **state)
{
	(void)state;
	struct esd_link_opts o;
	struct esd_link *l1, *l2;
	client_opts(&o, "esdc2", 7, 0);
	assert_int_equal(esd_link_connect(&o, &l1), 0);
	assert_null(round_trips(l1, 4));
	assert_int_equal(esd_link_connect(&o, &l2), -EADDRINUSE);
	esd_link_close(l1);
	assert_int_equal(esd_link_connect(&o, &l2), 0);
	assert_null(round_trips(l2, 5));
	esd_link_close(l2);
}

/* Two listeners on one interface (two shards of one host), told apart by
 * channel: a link to channel 1 is the second peer's. */
static void test_second_channel(void **state)
{
	(void)state;
	struct job j = {"esdc1", 3, 6, 1, NULL};
	client(&j);
	if (j.bad)
		fail_msg("channel 1: %s", j.bad);
}

static int sh(const char *cmd)
{
	return system(cmd);
}

int main(void)
{
	const char *why;
	if (esd_transport_backend_check("dpdk", &why))
		ESD_TEST_SKIP("dpdk backend: %s", why);
	if (unshare(CLONE_NEWNET))
		ESD_TEST_SKIP("cannot create a network namespace: %s", strerror(errno));
	if (sh("ip link add esdbr type bridge && ip link set esdbr up") != 0)
		ESD_TEST_SKIP("cannot create a bridge (ip tool or bridge missing)");
	const char *ends[3] = {"esds", "esdc1", "esdc2"};
	for (int i = 0; i < 3; i++) {
		char cmd[256];
		snprintf(cmd, sizeof(cmd),
		         "ip link add %s type veth peer name %sb && ip link set %sb master esdbr && "
		         "ip link set %sb up && ip link set %s up",
		         ends[i], ends[i], ends[i], ends[i], ends[i]);
		if (sh(cmd) != 0)
			ESD_TEST_SKIP("cannot create a veth pair (ip tool or veth missing)");
	}
	struct esd_link_opts o;
	peer_af_packet_opts(&o, "esds");
	o.max_links = 8;
	int rc = peer_start(&peer_a, &o);
	if (rc)
		ESD_TEST_SKIP("dpdk af_packet peer could not start: %s", esd_strerror(rc));
	o.dpdk_channel = 1;
	if ((rc = peer_start(&peer_b, &o))) {
		peer_kill(&peer_a);
		ESD_TEST_SKIP("dpdk af_packet peer could not start: %s", esd_strerror(rc));
	}
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_three_links_at_once),
	                                   cmocka_unit_test(test_start_over),
	                                   cmocka_unit_test(test_second_channel)};
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	peer_stop(&peer_b);
	peer_stop(&peer_a);
	return rc ? 1 : 0;
}
