/* Node directory lock, unix control socket, fd passing, peer death, uid refusal. */
#include "testutil.h"
#include "attach.h"

#include <esd/err.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <esd/clock.h>

static char *dir;

static void test_lock_exclusive(void **state)
{
	(void)state;
	char d[512];
	int fd;
	snprintf(d, sizeof(d), "%s/node-lock", dir);
	assert_int_equal(esd_nodedir_lock(d, &fd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		int fd2;
		_exit(esd_nodedir_lock(d, &fd2) == -EBUSY ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(fd);
	/* released: can be taken again */
	assert_int_equal(esd_nodedir_lock(d, &fd), 0);
	close(fd);
	/* a group-accessible directory is refused */
	chmod(d, 0750);
	assert_int_equal(esd_nodedir_lock(d, &fd), -EPERM);
	chmod(d, 0700);
}

static void test_roundtrip_fds_and_death(void **state)
{
	(void)state;
	char d[512];
	int lock, lfd;
	snprintf(d, sizeof(d), "%s/node-rt", dir);
	assert_int_equal(esd_nodedir_lock(d, &lock), 0);
	assert_int_equal(esd_attach_listen(d, &lfd), 0);
	struct stat st;
	char sp[600];
	snprintf(sp, sizeof(sp), "%s/%s", d, ESD_ATTACH_SOCK);
	assert_int_equal(stat(sp, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);

	pid_t pid = fork();
	if (pid == 0) {
		/* trainer: hello, receive a memfd, read it, commit, then die */
		int c, fds[2], nfds = 2;
		struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_HELLO);
		if (esd_attach_connect(d, &c))
			_exit(2);
		m.pid = (uint32_t)getpid();
		if (esd_attach_send(c, &m, NULL, 0))
			_exit(3);
		if (esd_attach_recv(c, &m, fds, &nfds, 5000) || m.op != ESD_AT_WELCOME || nfds != 1)
			_exit(4);
		char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fds[0], 0);
		if (p == MAP_FAILED || strcmp(p, "rows here"))
			_exit(5);
		m = esd_attach_msg_make(ESD_AT_COMMIT);
		m.iter = 7;
		m.loss = 0.5;
		esd_attach_send(c, &m, NULL, 0);
		pause(); /* killed by the parent */
		_exit(0);
	}
	int c = -1;
	uid_t uid;
	pid_t ppid;
	int64_t t0 = esd_now_ns();
	while (esd_attach_accept(lfd, &c, &uid, &ppid) == -EAGAIN)
		assert_true(esd_now_ns() - t0 < 5 * ESD_NS_PER_S), usleep(1000);
	assert_int_equal(uid, geteuid());
	assert_int_equal(ppid, pid);
	struct esd_attach_msg m;
	assert_int_equal(esd_attach_recv(c, &m, NULL, NULL, 5000), 0);
	assert_int_equal(m.op, ESD_AT_HELLO);
	assert_int_equal(m.pid, (uint32_t)pid);
	int mfd = memfd_create("t", MFD_CLOEXEC);
	assert_true(mfd >= 0);
	assert_int_equal(ftruncate(mfd, 4096), 0);
	assert_int_equal(pwrite(mfd, "rows here", 10, 0), 10);
	m = esd_attach_msg_make(ESD_AT_WELCOME);
	assert_int_equal(esd_attach_send(c, &m, &mfd, 1), 0);
	assert_int_equal(esd_attach_recv(c, &m, NULL, NULL, 5000), 0);
	assert_int_equal(m.op, ESD_AT_COMMIT);
	assert_int_equal(m.iter, 7);
	/* kill -9 of the trainer is seen at once */
	kill(pid, SIGKILL);
	t0 = esd_now_ns();
	assert_int_equal(esd_attach_recv(c, &m, NULL, NULL, 5000), -ECONNRESET);
	assert_true(esd_now_ns() - t0 < ESD_NS_PER_S);
	waitpid(pid, NULL, 0);
	close(c);
	close(mfd);
	close(lfd);
	close(lock);
}

static void test_bad_message_and_timeout(void **state)
{
	(void)state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	struct esd_attach_msg m;
	assert_int_equal(esd_attach_recv(sv[0], &m, NULL, NULL, 10), -ETIMEDOUT);
	assert_int_equal(write(sv[1], "garbage", 7), 7);
	assert_int_equal(esd_attach_recv(sv[0], &m, NULL, NULL, 1000), -EPROTO);
	m = esd_attach_msg_make(ESD_AT_HELLO);
	m.version = 99;
	assert_int_equal(write(sv[1], &m, sizeof(m)), (ssize_t)sizeof(m));
	assert_int_equal(esd_attach_recv(sv[0], &m, NULL, NULL, 1000), -EPROTO);
	close(sv[1]);
	assert_int_equal(esd_attach_recv(sv[0], &m, NULL, NULL, 1000), -ECONNRESET);
	close(sv[0]);
}

/* Protocols 2 and 3 are still spoken: a protocol-2 message is protocol
 * 3's up to nkeys, protocol 3's protocol 4's up to heartbeat_ms, each
 * sent and received in its own size; a message of one version in
 * another's size is refused. */
static void test_versions(void **state)
{
	(void)state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	assert_int_equal(esd_attach_msg_size(2), offsetof(struct esd_attach_msg, nkeys));
	assert_int_equal(esd_attach_msg_size(3), offsetof(struct esd_attach_msg, heartbeat_ms));
	assert_int_equal(esd_attach_msg_size(4), offsetof(struct esd_attach_msg, detail));
	assert_int_equal(esd_attach_msg_size(3), 144);
	assert_int_equal(esd_attach_msg_size(4), 152);
	assert_int_equal(esd_attach_msg_size(1), 0);
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_BATCH), r;
	m.version = 2;
	m.m = 7;
	m.nkeys = 99; /* not on a protocol-2 wire */
	assert_int_equal(esd_attach_send(sv[1], &m, NULL, 0), 0);
	memset(&r, 0xff, sizeof(r));
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), 0);
	assert_int_equal(r.version, 2);
	assert_int_equal(r.m, 7);
	assert_int_equal(r.nkeys, 0);
	m.version = 3;
	assert_int_equal(esd_attach_send(sv[1], &m, NULL, 0), 0);
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), 0);
	assert_int_equal(r.version, 3);
	assert_int_equal(r.nkeys, 99);
	/* a version-3 header in a version-2 size */
	assert_int_equal(write(sv[1], &m, esd_attach_msg_size(2)), (ssize_t)esd_attach_msg_size(2));
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), -EPROTO);
	m.version = 1;
	assert_int_equal(esd_attach_send(sv[1], &m, NULL, 0), -EINVAL);
	close(sv[0]);
	close(sv[1]);
}

/* Protocol 4: WELCOME carries the heartbeat timing; a FAILED travels with
 * its detail's bytes only; a heartbeat is not sent while the peer has not
 * read our last message. */
static void test_v4_failed_and_heartbeat(void **state)
{
	(void)state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_WELCOME), r;
	m.heartbeat_ms = 500;
	m.peer_timeout_ms = 3000;
	assert_int_equal(esd_attach_send(sv[1], &m, NULL, 0), 0);
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), 0);
	assert_int_equal(r.version, 4);
	assert_int_equal(r.heartbeat_ms, 500);
	assert_int_equal(r.peer_timeout_ms, 3000);
	m = esd_attach_msg_make(ESD_AT_FAILED);
	snprintf(m.detail, sizeof(m.detail), "ValueError: boom");
	assert_int_equal(esd_attach_send(sv[1], &m, NULL, 0), 0);
	char raw[1024];
	ssize_t n = recv(sv[0], raw, sizeof(raw), MSG_PEEK);
	assert_int_equal(n, (ssize_t)(esd_attach_msg_size(4) + strlen("ValueError: boom") + 1));
	memset(&r, 0xff, sizeof(r));
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), 0);
	assert_int_equal(r.op, ESD_AT_FAILED);
	assert_string_equal(r.detail, "ValueError: boom");
	/* a detail on another message is refused */
	m.op = ESD_AT_COMMIT;
	assert_int_equal(write(sv[1], &m, (size_t)n), n);
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), -EPROTO);
	/* heartbeats: the second waits until the first is read */
	struct esd_attach_msg hb = esd_attach_msg_make(ESD_AT_HEARTBEAT);
	assert_int_equal(esd_attach_send_nowait(sv[1], &hb), 0);
	assert_int_equal(esd_attach_send_nowait(sv[1], &hb), -EBUSY);
	assert_int_equal(esd_attach_recv(sv[0], &r, NULL, NULL, 1000), 0);
	assert_int_equal(r.op, ESD_AT_HEARTBEAT);
	assert_int_equal(esd_attach_send_nowait(sv[1], &hb), 0);
	close(sv[0]);
	close(sv[1]);
}

static void test_other_uid_refused(void **state)
{
	(void)state;
	if (geteuid() != 0)
		skip();
	char d[512];
	int lock, lfd;
	snprintf(d, sizeof(d), "%s/node-uid", dir);
	assert_int_equal(esd_nodedir_lock(d, &lock), 0);
	assert_int_equal(esd_attach_listen(d, &lfd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		int c;
		if (setgid(65534) || setuid(65534))
			_exit(9);
		_exit(esd_attach_connect(d, &c) == -EACCES ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	close(lfd);
	close(lock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lock_exclusive),
		cmocka_unit_test(test_roundtrip_fds_and_death),
		cmocka_unit_test(test_versions),
		cmocka_unit_test(test_v4_failed_and_heartbeat),
		cmocka_unit_test(test_bad_message_and_timeout),
		cmocka_unit_test(test_other_uid_refused),
	};
	dir = esd_test_mkdtemp("esd-attach");
	assert_non_null(dir);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	esd_test_rmtree(dir);
	free(dir);
	return rc ? 1 : 0;
}
