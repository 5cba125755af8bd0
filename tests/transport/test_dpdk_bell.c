/* The doorbells of memif links (transport/dpdk_bell.c): the region a
 * listener publishes, each side's view of a link's slot, a sleeper woken
 * by its peer in another process, a sleep that ends at its timeout when
 * nobody rings, regions that are missing or of another layout, and the
 * sweep of those whose listener is gone. No EAL. */
#include "testutil.h"

#include "dpdk_internal.h"

#include <esd/clock.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char addr[128];

static int setup(void **state)
{
	(void)state;
	snprintf(addr, sizeof(addr), "/tmp/esd-bell-test-%d.sock", (int)getpid());
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	esd_dpdk_bell_unpublish(addr);
	return 0;
}

static void test_missing_and_bad_ids(void **state)
{
	(void)state;
	struct dpdk_bell *b = (struct dpdk_bell *)1;
	assert_int_equal(esd_dpdk_bell_open(addr, 0, false, &b), -ENOENT);
	assert_null(b);
	assert_int_equal(esd_dpdk_bell_publish(addr, 4), 0);
	assert_int_equal(esd_dpdk_bell_open(addr, 4, false, &b), -EPROTO); /* ids 0..3 */
	assert_int_equal(esd_dpdk_bell_open(addr, 3, true, &b), 0);
	esd_dpdk_bell_close(b);
	esd_dpdk_bell_unpublish(addr);
	assert_int_equal(esd_dpdk_bell_open(addr, 0, true, &b), -ENOENT);
	esd_dpdk_bell_close(NULL);
}

/* A region that is not ours (another layout, or a truncated file). */
static void test_other_layout(void **state)
{
	(void)state;
	char name[256];
	snprintf(name, sizeof(name), "/esd-bell-_tmp_esd-bell-test-%d.sock", (int)getpid());
	int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	uint8_t junk[64];
	memset(junk, 0x5a, sizeof(junk));
	assert_int_equal(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	struct dpdk_bell *b;
	assert_int_equal(esd_dpdk_bell_open(addr, 0, false, &b), -EPROTO);
	assert_int_equal(ftruncate(fd, 16), 0);
	assert_int_equal(esd_dpdk_bell_open(addr, 0, false, &b), -EPROTO);
	close(fd);
	/* publishing replaces it */
	assert_int_equal(esd_dpdk_bell_publish(addr, 1), 0);
	assert_int_equal(esd_dpdk_bell_open(addr, 0, false, &b), 0);
	esd_dpdk_bell_close(b);
}

/* Nobody rings: the sleep lasts its timeout; rung before the sleep (after
 * the arm): no sleep at all. */
static void test_timeout_and_early_ring(void **state)
{
	(void)state;
	struct dpdk_bell *srv, *cli;
	assert_int_equal(esd_dpdk_bell_publish(addr, 2), 0);
	assert_int_equal(esd_dpdk_bell_open(addr, 1, true, &srv), 0);
	assert_int_equal(esd_dpdk_bell_open(addr, 1, false, &cli), 0);

	int64_t t0 = esd_now_ns();
	esd_dpdk_bell_wait(cli, 30 * ESD_NS_PER_MS);
	int64_t slept = esd_now_ns() - t0;
	assert_true(slept >= 25 * ESD_NS_PER_MS);
	assert_false(esd_dpdk_bell_armed(cli));

	esd_dpdk_bell_ring(srv); /* not armed: nothing to wake, nothing kept */
	esd_dpdk_bell_arm(cli);
	assert_true(esd_dpdk_bell_armed(cli));
	esd_dpdk_bell_ring(srv); /* the packet that raced the sleep */
	t0 = esd_now_ns();
	esd_dpdk_bell_wait(cli, 20 * ESD_NS_PER_S);
	assert_true(esd_now_ns() - t0 < 10 * ESD_NS_PER_S); /* not lost */

	/* the other direction is a bell of its own */
	esd_dpdk_bell_arm(srv);
	esd_dpdk_bell_ring(srv); /* ringing one's own peer does not wake oneself */
	t0 = esd_now_ns();
	esd_dpdk_bell_wait(srv, 30 * ESD_NS_PER_MS);
	assert_true(esd_now_ns() - t0 >= 25 * ESD_NS_PER_MS);

	esd_dpdk_bell_arm(cli);
	esd_dpdk_bell_disarm(cli); /* packets came after all */
	assert_false(esd_dpdk_bell_armed(cli));
	esd_dpdk_bell_close(cli);
	esd_dpdk_bell_close(srv);
}

/* The sleeper is another process (as a memif peer is): the ring of this
 * one wakes it long before its timeout. */
static void test_wakes_another_process(void **state)
{
	(void)state;
	struct dpdk_bell *srv;
	assert_int_equal(esd_dpdk_bell_publish(addr, 1), 0);
	assert_int_equal(esd_dpdk_bell_open(addr, 0, true, &srv), 0);
	int go[2];
	assert_int_equal(pipe(go), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct dpdk_bell *cli;
		if (esd_dpdk_bell_open(addr, 0, false, &cli))
			_exit(2);
		esd_dpdk_bell_arm(cli);
		char c = 1;
		if (write(go[1], &c, 1) != 1)
			_exit(3);
		int64_t t0 = esd_now_ns();
		esd_dpdk_bell_wait(cli, 30 * ESD_NS_PER_S);
		_exit(esd_now_ns() - t0 < 20 * ESD_NS_PER_S ? 0 : 4);
	}
	char c;
	assert_int_equal(read(go[0], &c, 1), 1);
	esd_sleep_ns(50 * ESD_NS_PER_MS); /* let it fall asleep */
	esd_dpdk_bell_ring(srv);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	close(go[0]);
	close(go[1]);
	esd_dpdk_bell_close(srv);
}

/* A listener killed before it could remove its region: the next publish
 * (of any address) sweeps it. */
static void test_sweeps_dead_owners(void **state)
{
	(void)state;
	char dead[160];
	snprintf(dead, sizeof(dead), "%s.dead", addr);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(esd_dpdk_bell_publish(dead, 2) ? 1 : 0); /* and never unpublish */
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct dpdk_bell *b;
	assert_int_equal(esd_dpdk_bell_open(dead, 1, false, &b), 0); /* still there */
	esd_dpdk_bell_close(b);
	assert_int_equal(esd_dpdk_bell_publish(addr, 1), 0);
	assert_int_equal(esd_dpdk_bell_open(dead, 1, false, &b), -ENOENT);
	assert_int_equal(esd_dpdk_bell_open(addr, 0, false, &b), 0); /* ours is alive */
	esd_dpdk_bell_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_missing_and_bad_ids, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_other_layout, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_timeout_and_early_ring, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wakes_another_process, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_sweeps_dead_owners, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
