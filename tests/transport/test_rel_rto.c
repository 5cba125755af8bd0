/* The reliable layer's retransmission timeout follows the round trip: over
 * a tcp link with the layer on, a peer that takes each frame 25 ms after it
 * came (so acknowledges it that late) gets it once, not every 10 ms (the
 * link's rto_ns, where the timeout starts): at most the first exchanges see
 * a retransmission. Then the peer answers at once again and a frame that is
 * lost (fault injection) is still sent again and delivered, and one lost
 * inside a burst without waiting for the timeout. A send that
 * finds the peer's close in the input after its frame went succeeds. */
#include "testutil.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/proto.h>
#include <esd/transport.h>
#include <pthread.h>
#include <string.h>

enum { EXCHANGES = 16, LATE_MS = 25 };
#define RTO_NS      (10 * ESD_NS_PER_MS)
#define RTO_LONG_NS (2 * ESD_NS_PER_S)
static int64_t rto_ns = RTO_NS; /* the links' least timeout */

struct server {
	struct esd_listener *ls;
	int late; /* exchanges taken LATE_MS late */
	int rc;
};

static void opts(struct esd_link_opts *o)
{
	esd_link_opts_init(o);
	o->reliable = 1;
	o->rto_ns = rto_ns;
	o->timeout_ns = 5 * ESD_NS_PER_S;
}

static int hello(struct esd_link *l, uint64_t token, uint16_t flags)
{
	struct esd_buf b;
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .job_token = token};
	esd_buf_init(&b);
	int rc = esd_enc_hello(&b, &h, flags);
	if (!rc)
		rc = esd_link_send(l, b.data, b.len);
	esd_buf_free(&b);
	return rc;
}

/* Echo every HELLO; the first s->late of them taken LATE_MS late. */
static void *serve(void *arg)
{
	struct server *s = arg;
	struct esd_link *l;
	struct esd_msg m;
	if ((s->rc = esd_listener_accept(s->ls, 5 * ESD_NS_PER_S, &l)))
		return NULL;
	for (int i = 0; !s->rc; i++) {
		if (i < s->late)
			esd_sleep_ns(LATE_MS * ESD_NS_PER_MS);
		s->rc = esd_link_recv(l, &m, 5 * ESD_NS_PER_S);
		if (s->rc == -ECONNRESET) {
			s->rc = 0; /* the client closed */
			break;
		}
		if (!s->rc)
			s->rc = hello(l, m.u.hello.job_token, ESD_FLAG_REPLY);
	}
	esd_link_close(l);
	return NULL;
}

/* A server thread on loopback taking its first late exchanges late, and a
 * client link to it with faults f. */
static void start(struct server *s, pthread_t *t, int late, struct esd_fault_opts f,
                  struct esd_link **l)
{
	struct esd_link_opts o;
	char addr[64];
	opts(&o);
	o.addr = "127.0.0.1:0";
	s->late = late;
	s->rc = 0;
	assert_int_equal(esd_listener_open(&o, &s->ls), 0);
	esd_listener_addr(s->ls, addr, sizeof(addr));
	assert_int_equal(pthread_create(t, NULL, serve, s), 0);
	o.addr = addr;
	o.faults = f;
	assert_int_equal(esd_link_connect(&o, l), 0);
}

static void stop(struct server *s, pthread_t t, struct esd_link *l)
{
	esd_link_close(l);
	pthread_join(t, NULL);
	assert_int_equal(s->rc, 0);
	esd_listener_close(s->ls);
}

static void exchange(struct esd_link *l, uint64_t token)
{
	struct esd_msg m;
	assert_int_equal(hello(l, token, 0), 0);
	assert_int_equal(esd_link_recv(l, &m, 5 * ESD_NS_PER_S), 0);
	assert_int_equal(m.hdr.op, ESD_OP_HELLO);
	assert_int_equal(m.u.hello.job_token, token);
}

static void test_timeout_follows_round_trip(void **state)
{
	(void)state;
	struct server s;
	struct esd_link *l;
	pthread_t t;
	start(&s, &t, EXCHANGES, (struct esd_fault_opts){0}, &l);
	for (uint64_t i = 0; i < EXCHANGES; i++)
		exchange(l, 100 + i);
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	printf("# %d exchanges acknowledged %d ms late: %llu retransmissions (a fixed 10 ms "
	       "timeout: two an exchange)\n",
	       EXCHANGES, LATE_MS, (unsigned long long)st.retx_frames);
	assert_true(st.reliable);
	assert_true(st.retx_frames <= 3);
	stop(&s, t, l);
}

/* Losses are still repaired once the timeout has grown and shrunk again. */
static void test_losses_repaired(void **state)
{
	(void)state;
	struct server s;
	struct esd_link *l;
	pthread_t t;
	start(&s, &t, 4, (struct esd_fault_opts){.drop = 0.2, .seed = 5}, &l);
	int64_t t0 = esd_now_ns();
	for (uint64_t i = 0; i < 64; i++)
		exchange(l, 500 + i);
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	printf("# 64 exchanges, 20 %% of the client's frames dropped: %llu dropped, %llu "
	       "retransmissions, %.0f ms\n",
	       (unsigned long long)st.fault_drops, (unsigned long long)st.retx_frames,
	       esd_ns_to_ms(esd_now_ns() - t0));
	assert_true(st.fault_drops > 0);
	assert_true(st.retx_frames > 0);
	stop(&s, t, l);
}

/* A burst of n HELLOs, then their n echoes. */
static void burst(struct esd_link *l, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(hello(l, 1000 + (uint64_t)i, 0), 0);
	for (int i = 0; i < n; i++) {
		struct esd_msg m;
		assert_int_equal(esd_link_recv(l, &m, 10 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.hello.job_token, 1000 + (uint64_t)i);
	}
}

/* A frame lost inside a burst is sent again once the peer's repeated
 * acknowledgements (for the frames after the hole) say so, not after the
 * timeout (2 s here). */
static void test_fast_retransmit(void **state)
{
	(void)state;
	struct server s;
	struct esd_link *l;
	struct esd_link_stats st;
	pthread_t t;
	rto_ns = RTO_LONG_NS;
	start(&s, &t, 0, (struct esd_fault_opts){.drop_seq = 5}, &l);
	int64_t t0 = esd_now_ns();
	burst(l, 64);
	double ms = esd_ns_to_ms(esd_now_ns() - t0);
	esd_link_stats(l, &st);
	printf("# 64 frames, the 5th lost: %llu dropped, %llu retransmissions, %.0f ms "
	       "(timeout %d ms)\n",
	       (unsigned long long)st.fault_drops, (unsigned long long)st.retx_frames, ms,
	       (int)(RTO_LONG_NS / ESD_NS_PER_MS));
	assert_int_equal(st.fault_drops, 1);
	assert_int_equal(st.retx_frames, 1);
	assert_true(ms < esd_ns_to_ms(RTO_LONG_NS) / 2);
	stop(&s, t, l);
	rto_ns = RTO_NS;
}

/* Send one HELLO and close: the peer that had what it waited for leaves. */
static void *say_and_leave(void *arg)
{
	struct server *s = arg;
	struct esd_link *l;
	if ((s->rc = esd_listener_accept(s->ls, 5 * ESD_NS_PER_S, &l)))
		return NULL;
	s->rc = hello(l, 7, 0);
	esd_link_close(l);
	return NULL;
}

/* A frame sent while the peer's close is already in the input is sent: the
 * send succeeds and the close is the next receive's to report. */
static void test_send_as_peer_leaves(void **state)
{
	(void)state;
	struct server s = {0};
	struct esd_link_opts o;
	struct esd_link *l;
	struct esd_msg m;
	pthread_t t;
	char addr[64];
	opts(&o);
	o.addr = "127.0.0.1:0";
	assert_int_equal(esd_listener_open(&o, &s.ls), 0);
	esd_listener_addr(s.ls, addr, sizeof(addr));
	assert_int_equal(pthread_create(&t, NULL, say_and_leave, &s), 0);
	o.addr = addr;
	assert_int_equal(esd_link_connect(&o, &l), 0);
	assert_int_equal(esd_link_recv(l, &m, 5 * ESD_NS_PER_S), 0); /* acknowledged */
	assert_int_equal(m.u.hello.job_token, 7);
	pthread_join(t, NULL);
	assert_int_equal(s.rc, 0);
	esd_sleep_ns(20 * ESD_NS_PER_MS); /* the close reaches this side */
	assert_int_equal(hello(l, 8, ESD_FLAG_REPLY), 0);
	assert_int_equal(esd_link_recv(l, &m, 5 * ESD_NS_PER_S), -ECONNRESET);
	assert_int_equal(hello(l, 9, ESD_FLAG_REPLY), -ECONNRESET);
	esd_link_close(l);
	esd_listener_close(s.ls);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_timeout_follows_round_trip),
	                                   cmocka_unit_test(test_losses_repaired),
	                                   cmocka_unit_test(test_fast_retransmit),
	                                   cmocka_unit_test(test_send_as_peer_leaves)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
