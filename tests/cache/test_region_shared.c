/*
 * Two processes sharing a region, as a daemon and its trainer do: the fd
 * travels over a unix socket (SCM_RIGHTS); the trainer waits for the
 * published iteration, reads the rows the daemon pulled, writes gradients
 * and commits them; the daemon sees them. A trainer that dies before its
 * commit leaves gradients the daemon does not count and zeroes.
 */
#include "testutil.h"

#include <esd/cache.h>
#include <esd/clock.h>
#include <esd/err.h>

#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define DIM 32
#define N   40

static float value_of(uint64_t key, uint32_t k)
{
	return (float)(key % 1000) + (float)k / 64.0f;
}

static float grad_of(uint64_t key, uint32_t k)
{
	return -(float)(key % 1000) * 0.5f - (float)k;
}

static int send_fd(int sock, int fd)
{
	char byte = 'F';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = {.msg_iov = &iov,
	                   .msg_iovlen = 1,
	                   .msg_control = u.buf,
	                   .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = {.msg_iov = &iov,
	                   .msg_iovlen = 1,
	                   .msg_control = u.buf,
	                   .msg_controllen = sizeof(u.buf)};
	if (recvmsg(sock, &m, 0) != 1)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* The trainer. Exit codes: 0 never (it dies in iteration 2), 3 = died as
 * planned, 10+ = a check failed. */
static int trainer(int sock, const uint64_t *keys)
{
	int fd = recv_fd(sock);
	struct esd_cache *c = NULL;
	if (fd < 0 || esd_cache_attach_fd(fd, 0, &c))
		return 10;
	close(fd);
	esd_cache_trainer_hello(c);
	if (esd_cache_wait_published(c, 1, 10 * ESD_NS_PER_S))
		return 11;
	const struct esd_cmeta *cm = esd_cache_meta_ro(c);
	uint32_t slots[N];
	uint64_t seq;
	do {
		seq = esd_cache_meta_read_begin(c);
		esd_cmeta_find_batch(cm, keys, N, slots);
	} while (esd_cache_meta_read_retry(c, seq));
	for (int i = 0; i < N; i++) {
		if (slots[i] == ESD_SLOT_NONE)
			return 12;
		const struct esd_cmeta_slot *s = esd_cmeta_slot(cm, slots[i]);
		if (s->pin_iter != 1 || s->state != ESD_ROW_CLEAN)
			return 13;
		const float *v = esd_cache_vec(c, slots[i]);
		float *g = esd_cache_grad(c, slots[i]);
		for (uint32_t k = 0; k < DIM; k++) {
			if (v[k] != value_of(keys[i], k))
				return 14;
			g[k] = grad_of(keys[i], k);
		}
	}
	esd_cache_grad_commit(c, 1);

	/* iteration 2: write some gradients, then die before committing */
	if (esd_cache_wait_published(c, 2, 10 * ESD_NS_PER_S))
		return 15;
	for (int i = 0; i < N / 2; i++)
		esd_cache_grad(c, slots[i])[0] = 12345.0f;
	_exit(3);
}

static pid_t child = -1;

/* Whatever happened, the trainer does not outlive the test. */
static int stop_child(void **state)
{
	(void)state;
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = -1;
	}
	return 0;
}

static void test_daemon_and_trainer(void **state)
{
	(void)state;
	struct esd_cache_config cfg = {.rows = 64,
	                               .dim = DIM,
	                               .optimizer = ESD_OPT_ADAGRAD,
	                               .ntables = 2,
	                               .policy = ESD_POLICY_LRU,
	                               .pages = ESD_CACHE_PAGES_AUTO};
	struct esd_cache *c = NULL;
	uint64_t keys[N];
	for (int i = 0; i < N; i++)
		keys[i] = esd_key_make((uint32_t)i % 2, (uint64_t)(i * 37)) + 0;
	/* sorted */
	for (int i = 0; i < N; i++)
		for (int j = i + 1; j < N; j++)
			if (keys[j] < keys[i]) {
				uint64_t t = keys[i];
				keys[i] = keys[j];
				keys[j] = t;
			}

	assert_int_equal(esd_cache_create(&cfg, &c), 0);
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(sv[0]);
		_exit(trainer(sv[1], keys));
	}
	child = pid;
	close(sv[1]);
	assert_int_equal(send_fd(sv[0], esd_cache_fd(c)), 0);

	/* daemon: iteration 1 */
	struct esd_cmeta_pull pulls[N];
	struct esd_cmeta_evict ev[N];
	uint32_t slots[N];
	struct esd_cmeta_fill f = {.pulls = pulls, .evicts = ev, .slots = slots};
	assert_int_equal(esd_cache_begin_iter(c, 1, keys, N, &f), 0);
	assert_int_equal(f.n_pulls, N);
	float row[DIM];
	for (size_t i = 0; i < f.n_pulls; i++) {
		for (uint32_t k = 0; k < DIM; k++)
			row[k] = value_of(pulls[i].key, k);
		assert_int_equal(esd_cache_scatter(c, &pulls[i].slot, 1, ESD_CACHE_VEC, row), 0);
	}
	esd_cache_meta_write_begin(c);
	for (size_t i = 0; i < f.n_pulls; i++)
		esd_cmeta_set_state(esd_cache_meta(c), pulls[i].slot, ESD_ROW_CLEAN, 1);
	esd_cache_meta_write_end(c);
	esd_cache_publish(c, 1);

	int64_t deadline = esd_now_ns() + 10 * ESD_NS_PER_S;
	while (esd_cache_grad_committed(c) < 1 && esd_now_ns() < deadline)
		esd_sleep_ns(100 * ESD_NS_PER_US);
	assert_int_equal(esd_cache_grad_committed(c), 1);
	assert_int_equal(esd_cache_trainer_pid(c), pid);
	for (int i = 0; i < N; i++) {
		const float *g = esd_cache_grad(c, slots[i]);
		for (uint32_t k = 0; k < DIM; k++)
			assert_true(g[k] == grad_of(keys[i], k));
	}

	/* iteration 2: the trainer dies mid-iteration */
	assert_int_equal(esd_cache_begin_iter(c, 2, keys, N, &f), 0);
	assert_int_equal(f.n_hits, N);
	esd_cache_publish(c, 2);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	child = -1;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 3);
	/* nothing of iteration 2 counts: the commit word still says 1, and
	 * the daemon zeroes the slots before replaying */
	assert_int_equal(esd_cache_grad_committed(c), 1);
	assert_true(esd_cache_grad(c, slots[0])[0] == 12345.0f);
	assert_int_equal(esd_cache_grad_zero(c, slots, N), 0);
	for (int i = 0; i < N; i++)
		assert_true(esd_cache_grad(c, slots[i])[0] == 0.0f);

	struct esd_cache_counters tot;
	esd_cache_counters_total(c, &tot);
	assert_int_equal(tot.miss_absent, N);
	assert_int_equal(tot.hits, N);
	close(sv[0]);
	esd_cache_close(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_daemon_and_trainer, stop_child),
	};
	return cmocka_run_group_tests(tests, NULL, NULL) ? 1 : 0;
}
