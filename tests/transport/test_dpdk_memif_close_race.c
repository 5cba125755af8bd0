/* Closing memif links whose peers leave at the same moment: 200 links
 * (72 under AddressSanitizer) in rounds of 8, each round a listener in
 * this process and a peer process (this program again, --peer) with 8
 * links to it. On a signal both sides leave at once, in random order with
 * random gaps: the peer closes its links (LINK_BYE), or exits without
 * closing them, or is killed with SIGKILL at a random moment (each in
 * turn), while this side closes its own. DPDK 22.11's memif tears a
 * connection down in the EAL's interrupt thread when the peer goes; a
 * close in another thread raced it and crashed ("EAL: Error: Invalid
 * memory", SIGSEGV). Passes when no process crashes, DPDK logs no error in
 * this process (its log goes to a file the test reads: a double free that
 * did not crash still says "Invalid memory"), every close returns within
 * its bound and every peer ends as its mode says. The seed is printed;
 * ESD_TEST_SEED repeats a run. Skips (77) when the EAL cannot start here. */
#include "testutil.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/proto.h>
#include <esd/transport.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <rte_log.h>

/* Fewer rounds under AddressSanitizer (every mode three times): the normal
 * build's rounds stress the race, the sanitizer's check the memory each
 * close path touches. */
#ifdef __SANITIZE_ADDRESS__
enum { ROUNDS = 9, LINKS = 8 };
#else
enum { ROUNDS = 25, LINKS = 8 };
#endif
enum mode { PEER_CLOSES, PEER_EXITS, PEER_KILLED, MODES };
static const char *const mode_name[MODES] = {"closes its links", "exits without closing",
                                             "is killed"};
/* A close waits at most this long for the peer's answer, then removes
 * its device anyway; the bound checked is that and a margin. */
#define CLOSE_BOUND_NS (8 * ESD_NS_PER_S)

static unsigned seed;
static FILE *dpdk_log; /* this process's DPDK log, read back */

/* Fails on any error DPDK logged in this process since the last call. */
static void check_dpdk_log(int round)
{
	char line[512];
	while (fgets(line, sizeof(line), dpdk_log))
		if (strstr(line, "Error") || strstr(line, "Invalid memory"))
			fail_msg("round %d: DPDK logged: %s", round, line);
	clearerr(dpdk_log);
}

static void memif_opts(struct esd_link_opts *o, const char *addr, uint32_t id)
{
	esd_link_opts_init(o);
	o->backend = "dpdk";
	o->addr = addr;
	o->memif_id = id;
	o->max_links = LINKS;
}

/* Up to 300 us, so that the two sides' leaving overlaps. */
static void random_gap(unsigned *r)
{
	esd_sleep_ns((int64_t)(rand_r(r) % 300) * ESD_NS_PER_US);
}

static void shuffle(int *order, int n, unsigned *r)
{
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)(rand_r(r) % (unsigned)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
}

static int send_hello(struct esd_link *l, uint32_t worker)
{
	struct esd_buf b;
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = worker, .job_token = 9};
	int rc = esd_enc_hello(&b, &h, 0);
	if (!rc)
		rc = esd_link_send(l, b.data, b.len);
	esd_buf_free(&b);
	return rc;
}

/* ---- the peer process ---------------------------------------------------- */

static int peer_main(const char *sock, int mode, unsigned r)
{
	struct esd_link *links[LINKS];
	for (uint32_t i = 0; i < LINKS; i++) {
		struct esd_link_opts o;
		memif_opts(&o, sock, i);
		int rc = esd_link_connect(&o, &links[i]);
		if (rc || send_hello(links[i], i)) {
			fprintf(stderr, "peer: link %u to %s: %s\n", i, sock, esd_strerror(rc));
			return 2;
		}
	}
	char go;
	if (read(0, &go, 1) != 1) /* the parent's signal to leave */
		return 3;
	if (mode == PEER_EXITS)
		_exit(0); /* the kernel closes the control sockets */
	int order[LINKS];
	shuffle(order, LINKS, &r);
	for (int i = 0; i < LINKS; i++) {
		esd_link_close(links[order[i]]);
		random_gap(&r);
	}
	return 0;
}

/* ---- this side ------------------------------------------------------------ */

static pid_t start_peer(const char *sock, int mode, unsigned r, int *go_fd)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(p[0], 0);
		close(p[0]);
		close(p[1]);
		char m[16], rs[16];
		snprintf(m, sizeof(m), "%d", mode);
		snprintf(rs, sizeof(rs), "%u", r);
		execl("/proc/self/exe", "test_dpdk_memif_close_race", "--peer", sock, m, rs,
		      (char *)NULL);
		_exit(127);
	}
	close(p[0]);
	*go_fd = p[1];
	return pid;
}

/* One round: LINKS links, both sides leave at once. The slowest close. */
static int64_t one_round(int round, unsigned *r)
{
	char sock[128];
	snprintf(sock, sizeof(sock), "/tmp/esd-memif-race-%d-%d.sock", (int)getpid(), round);
	struct esd_link_opts o;
	memif_opts(&o, sock, 0);
	struct esd_listener *ls;
	int rc = esd_listener_open(&o, &ls);
	if (rc == -ENODEV || rc == -ENOTSUP)
		ESD_TEST_SKIP("the dpdk backend or its EAL is not available here");
	assert_int_equal(rc, 0);
	int mode = round % MODES, go; /* each mode in turn */
	pid_t pid = start_peer(sock, mode, rand_r(r), &go);

	struct esd_link *links[LINKS];
	for (int i = 0; i < LINKS; i++) {
		assert_int_equal(esd_listener_accept(ls, 20 * ESD_NS_PER_S, &links[i]), 0);
		struct esd_msg m;
		assert_int_equal(esd_link_recv(links[i], &m, 10 * ESD_NS_PER_S), 0);
		assert_int_equal(m.hdr.op, ESD_OP_HELLO);
	}
	/* Both sides leave now: the peer as its mode says, this side by
	 * closing every link. */
	assert_int_equal(write(go, "g", 1), 1);
	close(go);
	int64_t kill_at = mode == PEER_KILLED ? (int64_t)(rand_r(r) % LINKS) : -1;
	int order[LINKS];
	shuffle(order, LINKS, r);
	int64_t slowest = 0;
	for (int i = 0; i < LINKS; i++) {
		if (i == kill_at)
			kill(pid, SIGKILL);
		int64_t t0 = esd_now_ns();
		esd_link_close(links[order[i]]);
		int64_t took = esd_now_ns() - t0;
		slowest = took > slowest ? took : slowest;
		random_gap(r);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (mode == PEER_KILLED)
		assert_true((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) ||
		            (WIFEXITED(status) && WEXITSTATUS(status) == 0));
	else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("round %d: the peer (it %s) ended with status 0x%x", round, mode_name[mode],
		         status);
	esd_listener_close(ls);
	unlink(sock);
	check_dpdk_log(round);
	printf("# round %2d: the peer %s; slowest close %.1f ms\n", round, mode_name[mode],
	       esd_ns_to_ms(slowest));
	return slowest;
}

static void test_close_while_peer_leaves(void **state)
{
	(void)state;
	unsigned r = seed;
	int64_t slowest = 0;
	for (int round = 0; round < ROUNDS; round++) {
		int64_t s = one_round(round, &r);
		slowest = s > slowest ? s : slowest;
	}
	printf("# %d links closed while their peers left, no crash; slowest close %.1f ms\n",
	       ROUNDS * LINKS, esd_ns_to_ms(slowest));
	assert_true(slowest < CLOSE_BOUND_NS);
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "--peer"))
		return peer_main(argv[2], atoi(argv[3]), (unsigned)strtoul(argv[4], NULL, 10));
	const char *s = getenv("ESD_TEST_SEED");
	seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)esd_now_ns() ^ (unsigned)getpid();
	printf("# seed %u (ESD_TEST_SEED=%u repeats this run)\n", seed, seed);
	char log[64];
	snprintf(log, sizeof(log), "/tmp/esd-memif-race-%d.log", (int)getpid());
	FILE *w = fopen(log, "w");
	dpdk_log = fopen(log, "r");
	if (!w || !dpdk_log)
		return 1;
	unlink(log);
	setvbuf(w, NULL, _IONBF, 0);
	rte_openlog_stream(w);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_close_while_peer_leaves),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
