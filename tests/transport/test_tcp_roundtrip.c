/* tcp links on loopback between two processes (this test and a forked
 * peer): HELLO, PUSH_VALUE, PUSH_GRAD, PULL, BARRIER and STATS round
 * trips with both engines, per-kind accounting, the rate setter, memory
 * that stays flat over many round trips, and a crashed peer detected
 * within a second. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <pthread.h>
#include <stdatomic.h>
#include <esd/err.h>
#include <malloc.h>
#include <string.h>

static const char *engine;

static void open_pair(struct peer *p, struct esd_link **l)
{
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.addr = "127.0.0.1:0";
	assert_int_equal(peer_start(p, &o), 0);
	o.addr = p->addr;
	o.tcp_engine = engine;
	assert_int_equal(esd_link_connect(&o, l), 0);
	assert_string_equal(esd_link_backend(*l), "tcp");
}

static void push(struct esd_buf *b, enum esd_op op, uint32_t kind, uint64_t iter, uint64_t seq,
                 const esd_key_t *keys, uint32_t n, float val)
{
	struct esd_rows_enc e;
	struct esd_rows r = {.iteration = iter,
	                     .sequence = seq,
	                     .worker = 1,
	                     .kind = kind,
	                     .dim = PEER_DIM,
	                     .state_dim = op == ESD_OP_PUSH_VALUE ? PEER_DIM : 0};
	float v[PEER_DIM], s[PEER_DIM];
	assert_int_equal(esd_enc_rows_begin(&e, b, op, &r), 0);
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t j = 0; j < PEER_DIM; j++) {
			v[j] = val;
			s[j] = 1.0f;
		}
		assert_int_equal(esd_enc_row(&e, keys[i], 0, v, s), 0);
	}
	esd_enc_rows_end(&e);
}

/* Keys 0..n-1 (n at most 4096). */
static const esd_key_t *key_range(uint32_t n)
{
	static esd_key_t keys[4096];
	assert_true(n <= 4096);
	for (uint32_t i = 0; i < n; i++)
		keys[i] = i;
	return keys;
}

static void test_round_trips(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	esd_buf_init(&b);
	open_pair(&p, &l);

	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 1, .job_token = 42};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_HELLO, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.hello.job_token, 42);
	assert_true(m.hdr.flags & ESD_FLAG_REPLY);

	/* A batch: an update push (values) and an evict push in one send. */
	esd_key_t k1[3] = {10, 11, 12}, k2[2] = {20, 21};
	push(&b, ESD_OP_PUSH_VALUE, ESD_XFER_UPDATE_PUSH, 0, 1, k1, 3, 5.0f);
	push(&b, ESD_OP_PUSH_VALUE, ESD_XFER_EVICT_PUSH, 0, 2, k2, 2, 7.0f);
	assert_int_equal(peer_send_buf(l, &b), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, ESD_NS_PER_S), 0);
		assert_int_equal(m.u.ack.status, 0);
		assert_int_equal(m.u.ack.sequence, (uint64_t)i + 1);
	}
	/* The same push again: acknowledged as a duplicate, not applied. */
	push(&b, ESD_OP_PUSH_VALUE, ESD_XFER_UPDATE_PUSH, 0, 1, k1, 3, 99.0f);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.ack.status, 1);
	/* Gradients add. */
	push(&b, ESD_OP_PUSH_GRAD, ESD_XFER_UPDATE_PUSH, 0, 3, k1, 1, 0.5f);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.ack.status, 0);

	struct esd_barrier br = {.iteration = 0, .worker = 1};
	assert_int_equal(esd_enc_barrier(&b, &br), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.ack.op, ESD_OP_BARRIER);
	assert_int_equal(m.u.ack.status, 0);

	esd_key_t pk[4] = {10, 20, 12, 555};
	assert_int_equal(esd_enc_pull(&b, 1, 9, 1, pk, 4), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.rows.count, 4);
	assert_int_equal(m.u.rows.sequence, 9);
	float want[4] = {5.5f, 7.0f, 5.0f, peer_init_value(555, 3)};
	for (uint32_t i = 0; i < 4; i++) {
		struct esd_row_view v;
		esd_rows_get(&m.u.rows, i, &v);
		assert_int_equal(v.key, pk[i]);
		assert_float_equal(v.value[i == 3 ? 3 : 0], want[i], 1e-6);
	}

	/* Accounting on this side: rows per kind. */
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	assert_int_equal(st.kind[ESD_XFER_UPDATE_PUSH].tx_rows, 3 + 3 + 1);
	assert_int_equal(st.kind[ESD_XFER_EVICT_PUSH].tx_rows, 2);
	assert_int_equal(st.kind[ESD_XFER_MISS_PULL].tx_frames, 1);
	assert_int_equal(st.kind[ESD_XFER_MISS_PULL].rx_rows, 4);
	assert_int_equal(st.kind[ESD_XFER_MISS_PULL].rx_bytes, esd_rows_frame_size(4, PEER_DIM, 0));
	assert_int_equal(st.reliable, 0);

	/* And on the peer's side, through STATS. */
	assert_int_equal(esd_enc_stats(&b, NULL, 0, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_STATS, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.stats.count, ESD_XFER_NKINDS);
	struct esd_stats_entry se;
	esd_stats_get(&m.u.stats, ESD_XFER_UPDATE_PUSH, &se);
	assert_int_equal(se.rx_rows, 7);
	esd_stats_get(&m.u.stats, ESD_XFER_MISS_PULL, &se);
	assert_int_equal(se.tx_rows, 4);

	/* The rate is a live setting. */
	esd_link_set_rate(l, 5000000000ull);
	assert_int_equal(esd_link_get_rate(l), 5000000000ull);
	esd_link_set_rate(l, 0);

	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

static void test_big_batch(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	esd_buf_init(&b);
	open_pair(&p, &l);
	/* Many pulls in flight at once: responses larger than socket buffers. */
	enum { NREQ = 64, NKEYS = 1024 };
	const esd_key_t *keys = key_range(NKEYS);
	for (uint32_t r = 0; r < NREQ; r++)
		assert_int_equal(esd_enc_pull(&b, 1, r, 1, keys, NKEYS), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	for (uint32_t r = 0; r < NREQ; r++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.sequence, r);
		assert_int_equal(m.u.rows.count, NKEYS);
		struct esd_row_view v;
		esd_rows_get(&m.u.rows, NKEYS - 1, &v);
		assert_float_equal(v.value[1], peer_init_value(NKEYS - 1, 1), 1e-6);
	}
	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

static void test_both_sides_sending(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	esd_buf_init(&b);
	open_pair(&p, &l);
	/* 10 MiB of requests in one send whose 100 MiB of answers come back
	 * while it is still being written: the peer blocks writing answers
	 * unless this side reads them meanwhile (into the receive backlog). */
	enum { NREQ = 320, NKEYS = 4096 };
	const esd_key_t *keys = key_range(NKEYS);
	for (uint32_t r = 0; r < NREQ; r++)
		assert_int_equal(esd_enc_pull(&b, 1, r, 1, keys, NKEYS), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	for (uint32_t r = 0; r < NREQ; r++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 10 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.sequence, r);
		assert_int_equal(m.u.rows.count, NKEYS);
	}
	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

/* One PULL of nkeys rows at a time, sequence numbers from to to - 1, each
 * sent while the previous answer is still lent out. */
static void pull_one_by_one(struct esd_link *l, uint32_t nkeys, uint32_t from, uint32_t to)
{
	const esd_key_t *keys = key_range(nkeys);
	struct esd_buf b;
	struct esd_msg m;
	esd_buf_init(&b);
	for (uint32_t r = from; r < to; r++) {
		assert_int_equal(esd_enc_pull(&b, 1, r, 1, keys, nkeys), 0);
		assert_int_equal(peer_send_buf(l, &b), 0);
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.sequence, r);
	}
	esd_buf_free(&b);
}

static size_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

/* Regression: each request went out while the previous answer was still
 * lent out, and the stream buffer doubled instead of moving the
 * unread bytes, up to the 256 MiB backlog limit on every link. 3,000 round
 * trips of 80 KiB answers (240 MiB) must leave the heap where it was. */
static void test_rx_buffer_stays_bounded(void **state)
{
	(void)state;
#if defined(__SANITIZE_ADDRESS__)
	skip(); /* the sanitizer's allocator keeps freed blocks: no figure */
#endif
	enum { ROUNDS = 3000, NKEYS = 1024, WARM = 100 };
	struct peer p;
	struct esd_link *l;
	open_pair(&p, &l);
	pull_one_by_one(l, NKEYS, 0, WARM);
	size_t before = heap_in_use();
	pull_one_by_one(l, NKEYS, WARM, ROUNDS);
	size_t after = heap_in_use();
	esd_link_close(l);
	peer_stop(&p);
	if (after > before + (4u << 20))
		fail_msg("heap grew from %zu to %zu bytes over %d round trips", before, after,
		         ROUNDS - WARM);
}

struct flipper {
	struct esd_link *l;
	atomic_int stop;
};

static void *flip_rate(void *arg)
{
	struct flipper *f = arg;
	for (uint64_t i = 0; !atomic_load(&f->stop); i++) {
		esd_link_set_rate(f->l, i % 2 ? 0 : 2000000000ull); /* 2 Gbit/s, unshaped */
		struct esd_link_stats st;
		esd_link_stats(f->l, &st); /* readable from another thread */
		esd_sleep_ns(200 * ESD_NS_PER_US);
	}
	return NULL;
}

static void test_rate_changes_while_sending(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	esd_buf_init(&b);
	open_pair(&p, &l);
	struct flipper f = {.l = l};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, flip_rate, &f), 0);
	esd_key_t keys[64];
	for (uint32_t i = 0; i < 64; i++)
		keys[i] = i;
	for (uint64_t s = 1; s <= 200; s++) {
		push(&b, ESD_OP_PUSH_GRAD, ESD_XFER_UPDATE_PUSH, 5, s, keys, 64, 0.0f);
		assert_int_equal(peer_send_buf(l, &b), 0);
	}
	for (uint64_t s = 1; s <= 200; s++) {
		assert_int_equal(peer_expect(l, &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.ack.sequence, s);
	}
	atomic_store(&f.stop, 1);
	pthread_join(t, NULL);
	esd_link_set_rate(l, 123);
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	assert_int_equal(st.rate_bps, 123);
	assert_int_equal(st.kind[ESD_XFER_UPDATE_PUSH].tx_frames, 200);
	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

/* Two links drawing from one uplink share its rate: their sends together
 * take at least what the rate allows for all their bytes (a lower bound
 * only: how much longer a busy machine takes is not asserted), and a rate
 * set on one link is the other's. */
static void test_shared_uplink(void **state)
{
	(void)state;
	const uint64_t rate = 80000000; /* 10 MB/s */
	struct esd_uplink *u;
	assert_int_equal(esd_uplink_create(rate, 0, &u), 0);
	struct peer p[2];
	struct esd_link *l[2];
	for (int i = 0; i < 2; i++) {
		struct esd_link_opts o;
		esd_link_opts_init(&o);
		o.addr = "127.0.0.1:0";
		assert_int_equal(peer_start(&p[i], &o), 0);
		o.addr = p[i].addr;
		o.tcp_engine = engine;
		o.uplink = u;
		assert_int_equal(esd_link_connect(&o, &l[i]), 0);
	}
	esd_key_t keys[64];
	for (uint32_t i = 0; i < 64; i++)
		keys[i] = i;
	struct esd_buf b;
	esd_buf_init(&b);
	size_t frame = 0;
	const int frames = 200; /* per link */
	int64_t t0 = esd_now_ns();
	for (int s = 1; s <= frames; s++) {
		for (int i = 0; i < 2; i++) {
			push(&b, ESD_OP_PUSH_GRAD, ESD_XFER_UPDATE_PUSH, 5, (uint64_t)s, keys, 64, 0.0f);
			frame = b.len;
			assert_int_equal(peer_send_buf(l[i], &b), 0);
		}
	}
	int64_t took = esd_now_ns() - t0;
	struct esd_msg m;
	for (int i = 0; i < 2; i++)
		for (int s = 1; s <= frames; s++)
			assert_int_equal(peer_expect(l[i], &m, ESD_OP_ACK, 5 * ESD_NS_PER_S), 0);
	/* the bucket's depth (256 KiB) may go out at once, the rest at the rate */
	double total = 2.0 * frames * (double)frame, burst = 256.0 * 1024;
	double least_ns = (total - burst) * 8e9 / (double)rate;
	assert_true((double)took >= least_ns);
	esd_link_set_rate(l[0], 1234);
	assert_int_equal(esd_link_get_rate(l[1]), 1234);
	for (int i = 0; i < 2; i++) {
		esd_link_close(l[i]);
		peer_stop(&p[i]);
	}
	esd_uplink_free(u);
	esd_buf_free(&b);
}

static void test_peer_crash_detected(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_msg m;
	open_pair(&p, &l);
	peer_kill(&p);
	int64_t t0 = esd_now_ns();
	int rc = esd_link_recv(l, &m, 2 * ESD_NS_PER_S);
	int64_t dt = esd_now_ns() - t0;
	assert_int_equal(rc, -ECONNRESET);
	assert_true(dt < ESD_NS_PER_S);
	assert_non_null(strstr(esd_link_last_error(l), "closed"));
	assert_int_equal(esd_link_recv(l, &m, 0), -EPIPE);
	esd_link_close(l);
}

static void test_refused_and_bad_options(void **state)
{
	(void)state;
	struct esd_link_opts o;
	struct esd_link *l;
	const char *why;
	esd_link_opts_init(&o);
	o.addr = "127.0.0.1:1";
	o.timeout_ns = 100 * ESD_NS_PER_MS;
	assert_int_equal(esd_link_connect(&o, &l), -ECONNREFUSED);
	o.addr = "no-port";
	assert_int_equal(esd_link_connect(&o, &l), -EINVAL);
	o.addr = "127.0.0.1:1";
	o.backend = "carrier-pigeon";
	assert_int_equal(esd_link_connect(&o, &l), -ENOENT);
	assert_int_equal(esd_transport_backend_check("carrier-pigeon", &why), -ENOENT);
	assert_int_equal(esd_transport_backend_check("tcp", &why), 0);
	o.backend = "tcp";
	o.faults.drop = 1.5;
	assert_int_equal(esd_link_connect(&o, &l), -EINVAL);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trips),
	    cmocka_unit_test(test_big_batch),
	    cmocka_unit_test(test_both_sides_sending),
	    cmocka_unit_test(test_rx_buffer_stays_bounded),
	    cmocka_unit_test(test_rate_changes_while_sending),
	    cmocka_unit_test(test_shared_uplink),
	    cmocka_unit_test(test_peer_crash_detected),
	    cmocka_unit_test(test_refused_and_bad_options),
	};
	int fails = 0;
	const char *engines[] = {"poll", "uring"};
	for (int i = 0; i < 2; i++) {
		engine = engines[i];
		if (argc > 1 && strcmp(argv[1], engine))
			continue;
		if (!strcmp(engine, "uring") && !ESD_TEST_HAVE_URING) {
			printf("# uring engine not built\n");
			continue;
		}
		printf("# engine %s\n", engine);
		fails += cmocka_run_group_tests_name(engine, tests, NULL, NULL);
	}
	return fails ? 1 : 0;
}
