/*
 * The daemon <-> trainer control channel. SOCK_SEQPACKET keeps message
 * boundaries and reports a dead peer as EOF at once, which is how a
 * trainer killed with -9 is detected within milliseconds. The node
 * directory is private (0700) and the peer's uid is checked with
 * SO_PEERCRED: shared memory fds only go to processes of our own user.
 */
#include "attach.h"

#include <esd/err.h>
#include <esd/log.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <stdbool.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

struct esd_attach_msg esd_attach_msg_make(enum esd_attach_op op)
{
	struct esd_attach_msg m;
	memset(&m, 0, sizeof(m));
	m.magic = ESD_ATTACH_MAGIC;
	m.version = ESD_ATTACH_VERSION;
	m.op = (uint16_t)op;
	return m;
}

size_t esd_attach_msg_size(uint16_t version)
{
	switch (version) {
	case 2:
		return offsetof(struct esd_attach_msg, nkeys);
	case 3:
		return offsetof(struct esd_attach_msg, heartbeat_ms);
	case 4:
		return offsetof(struct esd_attach_msg, detail);
	default:
		return 0;
	}
}

/* Bytes of msg on the wire: its version's, and a FAILED's detail. */
static size_t wire_size(const struct esd_attach_msg *msg)
{
	size_t len = esd_attach_msg_size(msg->version);
	if (len && msg->version >= 4 && msg->op == ESD_AT_FAILED)
		len += strnlen(msg->detail, ESD_ATTACH_DETAIL - 1) + 1;
	return len;
}

static int sock_path(const char *dir, const char *name, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	int n = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path)) {
		ESD_ERR("attach", "socket path %s/%s is longer than %zu bytes", dir, name,
			sizeof(sa->sun_path) - 1);
		return -ENAMETOOLONG;
	}
	return 0;
}

int esd_nodedir_lock(const char *dir, int *lock_fd)
{
	struct stat st;
	char path[4096], buf[32];
	int fd, rc;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = esd_neg_errno();
		ESD_ERR("attach", "cannot create node directory %s: %s", dir, esd_strerror(rc));
		return rc;
	}
	if (stat(dir, &st) < 0)
		return esd_neg_errno();
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
		ESD_ERR("attach", "node directory %s must be a directory of uid %u with mode 0700 "
			"(is uid %u mode %o)", dir, (unsigned)geteuid(), (unsigned)st.st_uid,
			(unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, ESD_ATTACH_LOCK);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return esd_neg_errno();
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = esd_neg_errno();
		if (rc == -EWOULDBLOCK) {
			ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
			buf[n > 0 ? n : 0] = '\0';
			ESD_ERR("attach", "node directory %s is in use by pid %ld (lock %s)", dir,
				strtol(buf, NULL, 10), path);
			rc = -EBUSY;
		}
		close(fd);
		return rc;
	}
	int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
		rc = esd_neg_errno();
		close(fd);
		return rc;
	}
	*lock_fd = fd;
	return 0;
}

int esd_attach_listen(const char *dir, int *listen_fd)
{
	struct sockaddr_un sa;
	int fd, rc = sock_path(dir, ESD_ATTACH_SOCK, &sa);

	if (rc)
		return rc;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return esd_neg_errno();
	/* bind a temporary name, listen, then rename into place: a trainer
	 * never finds a socket that is not listening yet */
	struct sockaddr_un tmp;
	rc = sock_path(dir, ESD_ATTACH_SOCK ".new", &tmp);
	if (rc) {
		close(fd);
		return rc;
	}
	unlink(tmp.sun_path);
	if (bind(fd, (struct sockaddr *)&tmp, sizeof(tmp)) < 0 || chmod(tmp.sun_path, 0600) < 0 ||
	    listen(fd, 8) < 0 || rename(tmp.sun_path, sa.sun_path) < 0) {
		rc = esd_neg_errno();
		ESD_ERR("attach", "cannot listen on %s: %s", sa.sun_path, esd_strerror(rc));
		unlink(tmp.sun_path);
		close(fd);
		return rc;
	}
	*listen_fd = fd;
	return 0;
}

int esd_attach_accept(int listen_fd, int *fd, uid_t *uid, pid_t *pid)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

	if (c < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : esd_neg_errno();
	if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		int rc = esd_neg_errno();
		close(c);
		return rc;
	}
	*fd = c;
	*uid = cred.uid;
	*pid = cred.pid;
	return 0;
}

int esd_attach_connect(const char *dir, int *fd)
{
	struct sockaddr_un sa;
	int c, rc = sock_path(dir, ESD_ATTACH_SOCK, &sa);

	if (rc)
		return rc;
	c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c < 0)
		return esd_neg_errno();
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = esd_neg_errno();
		close(c);
		return rc;
	}
	*fd = c;
	return 0;
}

int esd_attach_send(int fd, const struct esd_attach_msg *msg, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	const size_t len = wire_size(msg);
	struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (nfds < 0 || nfds > 4 || !len)
		return -EINVAL;
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n == (ssize_t)len)
			return 0;
		if (n >= 0)
			return -EIO;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) { /* non-blocking socket full: wait briefly */
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (poll(&p, 1, 1000) <= 0)
				return -ETIMEDOUT;
			continue;
		}
		return esd_neg_errno();
	}
}

int esd_attach_send_nowait(int fd, const struct esd_attach_msg *msg)
{
	const size_t len = wire_size(msg);
	int unread = 0;
	if (!len)
		return -EINVAL;
	if (ioctl(fd, SIOCOUTQ, &unread) == 0 && unread > 0)
		return -EBUSY;
	ssize_t n = send(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n == (ssize_t)len)
		return 0;
	return n >= 0 ? -EIO : errno == EWOULDBLOCK ? -EAGAIN : esd_neg_errno();
}

/* A received message of n bytes is whole: its version's size, or a
 * version-4 FAILED with a detail. */
static bool whole(const struct esd_attach_msg *msg, size_t n)
{
	if (n < offsetof(struct esd_attach_msg, pid) || msg->magic != ESD_ATTACH_MAGIC)
		return false;
	size_t len = esd_attach_msg_size(msg->version);
	if (len && n > len && msg->version >= 4 && msg->op == ESD_AT_FAILED)
		return n <= sizeof(*msg);
	return len && n == len;
}

int esd_attach_recv(int fd, struct esd_attach_msg *msg, int *fds, int *nfds, int timeout_ms)
{
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = msg, .iov_len = sizeof(*msg)};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	int want = nfds ? *nfds : 0, got = 0;
	ssize_t n;

	if (nfds)
		*nfds = 0;
	struct pollfd p = {.fd = fd, .events = POLLIN};
	for (;;) {
		int r = poll(&p, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return esd_neg_errno();
		if (r == 0)
			return -ETIMEDOUT;
		break;
	}
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? -ECONNRESET : esd_neg_errno();
	if (n == 0)
		return -ECONNRESET;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int cnt = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *in = (int *)CMSG_DATA(c);
		for (int i = 0; i < cnt; i++) {
			if (got < want)
				fds[got++] = in[i];
			else
				close(in[i]);
		}
	}
	if (nfds)
		*nfds = got;
	if (!whole(msg, (size_t)n) || (mh.msg_flags & MSG_TRUNC)) {
		ESD_ERR("attach", "bad control message (%zd bytes, magic %#x, version %u)", n,
			(unsigned)msg->magic, (unsigned)msg->version);
		for (int i = 0; i < got; i++)
			close(fds[i]);
		if (nfds)
			*nfds = 0;
		return -EPROTO;
	}
	memset((char *)msg + n, 0, sizeof(*msg) - (size_t)n);
	msg->text[sizeof(msg->text) - 1] = '\0';
	msg->detail[sizeof(msg->detail) - 1] = '\0';
	return 0;
}
