/* Exactly once under faults: with drop 2 %, duplicate 5 % and reorder 25 %
 * injected on both sides of a tcp link between two processes, every push
 * is applied exactly once (the pulled values equal the sum of the pushed
 * gradients) and every pull is answered once, in order. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <string.h>

#define ITERS  40
#define PUSHES 8
#define KEYS   32

static void run(const char *engine, int peer_faults)
{
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.addr = "127.0.0.1:0";
	o.faults = (struct esd_fault_opts){.drop = 0.02, .dup = 0.05, .reorder = 0.25, .seed = 7};
	o.rto_ns = 5 * ESD_NS_PER_MS;
	o.tcp_engine = engine;
	if (!peer_faults)
		o.faults = (struct esd_fault_opts){0};
	assert_int_equal(peer_start(&p, &o), 0);
	o.faults = (struct esd_fault_opts){.drop = 0.02, .dup = 0.05, .reorder = 0.25};
	o.addr = p.addr;
	o.faults.seed = 11;
	assert_int_equal(esd_link_connect(&o, &l), 0);
	esd_buf_init(&b);

	static float expect[KEYS];
	esd_key_t keys[KEYS];
	for (uint32_t k = 0; k < KEYS; k++) {
		keys[k] = 1000 + k;
		expect[k] = peer_init_value(keys[k], 0);
	}
	uint64_t rng = 3, answered = 0, applied = 0;
	for (uint64_t it = 0; it < ITERS; it++) {
		/* A batch of gradient pushes, sent at once. */
		for (uint64_t s = 0; s < PUSHES; s++) {
			struct esd_rows_enc e;
			struct esd_rows r = {.iteration = it,
			                     .sequence = it * PUSHES + s + 1, /* as esdd: 1, 2, ... */
			                     .worker = 3,
			                     .kind = ESD_XFER_UPDATE_PUSH,
			                     .dim = PEER_DIM};
			float g[PEER_DIM];
			assert_int_equal(esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &r), 0);
			for (int n = 0; n < 4; n++) {
				uint32_t k = (uint32_t)(esd_test_rand(&rng) % KEYS);
				float v = (float)(esd_test_rand(&rng) % 8);
				for (uint32_t j = 0; j < PEER_DIM; j++)
					g[j] = v;
				expect[k] += v;
				assert_int_equal(esd_enc_row(&e, keys[k], 0, g, NULL), 0);
			}
			esd_enc_rows_end(&e);
		}
		assert_int_equal(peer_send_buf(l, &b), 0);
		for (uint64_t s = 0; s < PUSHES; s++) {
			assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
			assert_int_equal(m.u.ack.iteration, it);
			assert_int_equal(m.u.ack.sequence, it * PUSHES + s + 1); /* in order, once */
			assert_int_equal(m.u.ack.status, 0);   /* applied, never a duplicate */
			applied++;
		}
		struct esd_barrier br = {.iteration = it, .worker = 3};
		assert_int_equal(esd_enc_barrier(&b, &br), 0);
		assert_int_equal(esd_enc_pull(&b, it + 1, it, 3, keys, KEYS), 0);
		assert_int_equal(peer_send_buf(l, &b), 0);
		assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.ack.status, 0);
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.sequence, it);
		answered++;
		for (uint32_t k = 0; k < KEYS; k++) {
			struct esd_row_view v;
			esd_rows_get(&m.u.rows, k, &v);
			assert_float_equal(v.value[0], expect[k], 1e-3);
		}
	}
	assert_int_equal(esd_link_recv(l, &m, 50 * ESD_NS_PER_MS), -ETIMEDOUT); /* nothing extra */
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	printf("# %s: %llu pushes applied once, %llu pulls answered; injected drops %llu dups "
	       "%llu reorders %llu; retransmitted %llu, duplicates dropped %llu\n",
	       engine, (unsigned long long)applied, (unsigned long long)answered,
	       (unsigned long long)st.fault_drops, (unsigned long long)st.fault_dups,
	       (unsigned long long)st.fault_reorders, (unsigned long long)st.retx_frames,
	       (unsigned long long)st.dup_rx_frames);
	assert_true(st.reliable);
	assert_true(st.fault_drops > 0 && st.fault_dups > 0 && st.fault_reorders > 0);
	/* Accounting counts each application frame once, whatever the faults. */
	assert_int_equal(st.kind[ESD_XFER_UPDATE_PUSH].tx_frames, ITERS * PUSHES);
	assert_int_equal(st.kind[ESD_XFER_MISS_PULL].rx_frames, ITERS);
	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

static void test_exactly_once_poll(void **state)
{
	(void)state;
	run("poll", 1);
}

/* Faults on this side only: the peer turns its reliable layer on when the
 * first RELIABLE frame arrives. */
static void test_exactly_once_one_sided(void **state)
{
	(void)state;
	run("poll", 0);
}

static void test_exactly_once_uring(void **state)
{
	(void)state;
	if (!ESD_TEST_HAVE_URING)
		skip();
	run("uring", 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exactly_once_poll),
	    cmocka_unit_test(test_exactly_once_uring),
	    cmocka_unit_test(test_exactly_once_one_sided),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
