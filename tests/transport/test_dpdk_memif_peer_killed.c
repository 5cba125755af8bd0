/* A memif peer killed (SIGKILL) while this side is busy on its links:
 * DPDK 22.11's memif unmaps the dead peer's shared memory in the EAL's
 * interrupt thread while a link thread may be inside a burst on the same
 * rings, and the burst then faulted. With the guarded bursts
 * (transport/dpdk_guard.c) such a fault is the peer's death: the link
 * fails with -ECONNRESET and this process goes on. ROUNDS rounds, each a
 * peer process (this program again, --peer) with LINKS links to a
 * listener here; every link has a thread on each side that sends frames
 * of several packets and reads what comes, without pause; the peer is
 * killed at a random moment. Passes when this process survives every
 * round and each link ends with -ECONNRESET or -EPIPE within the bound.
 * Prints how many links ended by a fault caught in a burst. Skips (77)
 * when the EAL cannot start here. */
#include "testutil.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/proto.h>
#include <esd/transport.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ROUNDS = 30, LINKS = 4, FRAME = 48 * 1024 };
/* From the kill to every link thread's end: the link goes down in the
 * interrupt thread at once; a receive sees it within its next checks. */
#define END_BOUND_NS (5 * ESD_NS_PER_S)

static void memif_opts(struct esd_link_opts *o, const char *addr, uint32_t id)
{
	esd_link_opts_init(o);
	o->backend = "dpdk";
	o->addr = addr;
	o->memif_id = id;
	o->max_links = LINKS;
}

struct pump {
	struct esd_link *l;
	pthread_t t;
	volatile int stop;
	int rc;       /* how the link ended */
	int64_t end;  /* when */
	char why[256];
};

/* Send frames of FRAME bytes (a STATS-sized frame would do as well: the
 * bytes only have to cross) and read whatever comes, until the link
 * fails or stop. */
static void *pump_main(void *arg)
{
	struct pump *p = arg;
	static const uint8_t zeros[FRAME];
	struct esd_buf b;
	esd_buf_init(&b);
	struct esd_rows_enc e;
	struct esd_rows r = {.kind = ESD_XFER_UPDATE_PUSH, .dim = 16};
	float g[16] = {0};
	(void)zeros;
	int rc = 0;
	while (!p->stop) {
		esd_buf_reset(&b);
		if ((rc = esd_enc_rows_begin(&e, &b, ESD_OP_PUSH_GRAD, &r)))
			break;
		for (uint32_t i = 0; i < FRAME / 80; i++)
			esd_enc_row(&e, i, 0, g, NULL);
		esd_enc_rows_end(&e);
		if ((rc = esd_link_send(p->l, b.data, b.len)))
			break;
		struct esd_msg m;
		while ((rc = esd_link_recv(p->l, &m, 0)) == 0)
			;
		if (rc != -ETIMEDOUT)
			break;
		rc = 0;
	}
	p->rc = rc;
	p->end = esd_now_ns();
	snprintf(p->why, sizeof(p->why), "%s", esd_link_last_error(p->l));
	esd_buf_free(&b);
	return NULL;
}

static int peer_main(const char *sock)
{
	struct pump p[LINKS];
	memset(p, 0, sizeof(p));
	for (uint32_t i = 0; i < LINKS; i++) {
		struct esd_link_opts o;
		memif_opts(&o, sock, i);
		int rc = esd_link_connect(&o, &p[i].l);
		if (rc) {
			fprintf(stderr, "peer: link %u to %s: %s\n", i, sock, esd_strerror(rc));
			return 2;
		}
	}
	for (int i = 0; i < LINKS; i++)
		pthread_create(&p[i].t, NULL, pump_main, &p[i]);
	for (int i = 0; i < LINKS; i++)
		pthread_join(p[i].t, NULL); /* until killed */
	return 0;
}

/* One round; the number of links that ended by a fault caught in a burst. */
static int one_round(int round, unsigned *r)
{
	char sock[128];
	snprintf(sock, sizeof(sock), "/tmp/esd-memif-kill-%d-%d.sock", (int)getpid(), round);
	struct esd_link_opts o;
	memif_opts(&o, sock, 0);
	struct esd_listener *ls;
	int rc = esd_listener_open(&o, &ls);
	if (rc == -ENODEV || rc == -ENOTSUP)
		ESD_TEST_SKIP("the dpdk backend or its EAL is not available here");
	assert_int_equal(rc, 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/proc/self/exe", "test_dpdk_memif_peer_killed", "--peer", sock, (char *)NULL);
		_exit(127);
	}
	struct pump p[LINKS];
	memset(p, 0, sizeof(p));
	for (int i = 0; i < LINKS; i++) {
		assert_int_equal(esd_listener_accept(ls, 20 * ESD_NS_PER_S, &p[i].l), 0);
		pthread_create(&p[i].t, NULL, pump_main, &p[i]);
	}
	esd_sleep_ns((int64_t)(5 + rand_r(r) % 60) * ESD_NS_PER_MS);
	int64_t killed = esd_now_ns();
	kill(pid, SIGKILL);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	int caught = 0;
	int64_t slowest = 0;
	for (int i = 0; i < LINKS; i++) {
		pthread_join(p[i].t, NULL);
		if (p[i].rc != -ECONNRESET && p[i].rc != -EPIPE)
			fail_msg("round %d link %d ended with %s (%s)", round, i, esd_strerror(p[i].rc),
			         p[i].why);
		caught += strstr(p[i].why, "went away under") != NULL;
		slowest = p[i].end - killed > slowest ? p[i].end - killed : slowest;
		esd_link_close(p[i].l);
	}
	esd_listener_close(ls);
	unlink(sock);
	printf("# round %2d: every link down %.1f ms after the kill; %d by a fault in a burst\n",
	       round, esd_ns_to_ms(slowest), caught);
	assert_true(slowest < END_BOUND_NS);
	return caught;
}

static void test_peer_killed_while_busy(void **state)
{
	(void)state;
	const char *s = getenv("ESD_TEST_SEED");
	unsigned seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)esd_now_ns();
	printf("# seed %u (ESD_TEST_SEED=%u repeats this run)\n", seed, seed);
	unsigned r = seed;
	int caught = 0;
	for (int round = 0; round < ROUNDS; round++)
		caught += one_round(round, &r);
	printf("# %d peers killed under %d busy links: this process lived; %d faults in a "
	       "burst caught\n",
	       ROUNDS, ROUNDS * LINKS, caught);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--peer"))
		return peer_main(argv[2]);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_peer_killed_while_busy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
