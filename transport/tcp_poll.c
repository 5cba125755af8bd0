/*
 * poll(2) engine of the tcp backend: non-blocking sendmsg of a batch of
 * frames, and while the socket is full, reads of what the peer sends into
 * the stream buffer (so two peers sending at once never deadlock). Used
 * when the build has no liburing, or with tcp_engine = "poll".
 */
#include "tcp_internal.h"

#include <esd/clock.h>
#include <esd/err.h>

#include <poll.h>
#include <string.h>
#include <sys/socket.h>

static int poll_init(struct tcp_conn *c)
{
	(void)c;
	return 0;
}

static void poll_fini(struct tcp_conn *c)
{
	(void)c;
}

static int wait_fd(struct tcp_conn *c, short events, int64_t deadline, short *revents)
{
	struct pollfd pfd = {.fd = c->fd, .events = events};
	for (;;) {
		int64_t left = deadline < 0 ? -1 : deadline - esd_now_ns();
		if (deadline >= 0 && left <= 0)
			return -ETIMEDOUT;
		int ms = left < 0 ? -1 : (int)((left + ESD_NS_PER_MS - 1) / ESD_NS_PER_MS);
		int r = poll(&pfd, 1, ms);
		if (r > 0) {
			*revents = pfd.revents;
			return 0;
		}
		if (r < 0 && errno != EINTR)
			return esd_neg_errno();
	}
}

/* Read what is there (non-blocking). 1 = read something, 0 = nothing. */
static int read_some(struct tcp_conn *c, size_t want)
{
	uint8_t *p;
	size_t room;
	int rc = esd_tcp_rx_space(c, want, &p, &room);
	if (rc)
		return rc;
	if (!room)
		return -ENOBUFS;
	ssize_t r = recv(c->fd, p, room, MSG_DONTWAIT);
	if (r > 0) {
		esd_tcp_rx_commit(c, (size_t)r);
		return 1;
	}
	if (r == 0)
		return -ECONNRESET;
	if (errno == EAGAIN || errno == EINTR)
		return 0;
	return esd_neg_errno();
}

static int poll_send(struct tcp_conn *c, struct iovec *iov, int n, int64_t deadline)
{
	while (n > 0) {
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0) {
			if (errno != EAGAIN && errno != EINTR)
				return esd_wire_fail(&c->w, esd_neg_errno(), "tcp send to %s: %s",
				                     c->w.peer, strerror(errno));
			short rev;
			int rc = wait_fd(c, POLLOUT | (c->eof ? 0 : POLLIN), deadline, &rev);
			if (rc)
				return esd_wire_fail(&c->w, rc, "tcp send to %s: %s", c->w.peer,
				                     esd_strerror(rc));
			if ((rev & POLLIN) && !c->eof) {
				rc = read_some(c, 1);
				if (rc == -ECONNRESET)
					c->eof = 1;
				else if (rc < 0)
					return esd_wire_fail(&c->w, rc, "tcp link to %s: %s", c->w.peer,
					                     rc == -ENOBUFS ? "receive backlog full "
					                                  "while sending"
					                                : esd_strerror(rc));
			}
			continue;
		}
		size_t left = (size_t)w;
		while (n > 0 && left >= iov->iov_len) {
			left -= iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (uint8_t *)iov->iov_base + left;
			iov->iov_len -= left;
		}
	}
	return 0;
}

static int poll_fill(struct tcp_conn *c, size_t want, int64_t deadline)
{
	for (;;) {
		int rc = read_some(c, want);
		if (rc)
			return rc < 0 ? rc : 0;
		short rev;
		if ((rc = wait_fd(c, POLLIN, deadline, &rev)))
			return rc;
	}
}

const struct tcp_engine esd_tcp_engine_poll = {
    .name = "poll",
    .init = poll_init,
    .fini = poll_fini,
    .send = poll_send,
    .fill = poll_fill,
};
