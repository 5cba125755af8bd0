/*
 * io_uring engine of the tcp backend: one ring per link. A batch of frames
 * goes out as one sendmsg submission (resubmitted from where a short send
 * stopped); a receive into the stream buffer is kept armed while a send
 * waits, so a peer that is itself sending is read rather than deadlocked.
 * The armed receive owns the tail of the stream buffer until it completes:
 * fill() always reaps it before the buffer may move.
 */
#include "tcp_internal.h"

#include <esd/clock.h>
#include <esd/err.h>

#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define TAG_SEND 1u
#define TAG_RECV 2u

struct uring_state {
	struct io_uring ring;
	int recv_armed;
	struct msghdr mh;
};

static int uring_init(struct tcp_conn *c)
{
	struct uring_state *u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	/* Completions run at the next wait rather than by interrupting the
	 * task (5.19+); plain setup on older kernels. */
	int rc = io_uring_queue_init(8, &u->ring, IORING_SETUP_COOP_TASKRUN);
	if (rc == -EINVAL)
		rc = io_uring_queue_init(8, &u->ring, 0);
	if (rc) {
		free(u);
		return rc;
	}
	c->es = u;
	return 0;
}

static void uring_fini(struct tcp_conn *c)
{
	struct uring_state *u = c->es;
	if (!u)
		return;
	/* The socket was shut down: an armed receive completes; exiting the
	 * ring cancels whatever is left before the buffer is freed. */
	io_uring_queue_exit(&u->ring);
	free(u);
	c->es = NULL;
}

static int arm_recv(struct tcp_conn *c, size_t want)
{
	struct uring_state *u = c->es;
	uint8_t *p;
	size_t room;
	int rc = esd_tcp_rx_space(c, want, &p, &room);
	if (rc)
		return rc;
	if (!room)
		return -ENOBUFS;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	if (!sqe)
		return -EBUSY;
	io_uring_prep_recv(sqe, c->fd, p, room, 0);
	io_uring_sqe_set_data64(sqe, TAG_RECV);
	u->recv_armed = 1;
	return 0;
}

/* Wait for one completion until deadline; returns its tag and result. */
static int reap(struct tcp_conn *c, int64_t deadline, uint64_t *tag, int *res)
{
	struct uring_state *u = c->es;
	struct io_uring_cqe *cqe;
	int rc;
	for (;;) {
		if (deadline < 0) {
			rc = io_uring_wait_cqe(&u->ring, &cqe);
		} else {
			int64_t left = deadline - esd_now_ns();
			if (left < 0)
				left = 0;
			struct __kernel_timespec ts = {.tv_sec = left / ESD_NS_PER_S,
			                               .tv_nsec = left % ESD_NS_PER_S};
			rc = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);
		}
		if (rc == -EINTR)
			continue;
		if (rc == -ETIME)
			return -ETIMEDOUT;
		if (rc)
			return rc;
		*tag = io_uring_cqe_get_data64(cqe);
		*res = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		if (*tag == TAG_RECV)
			u->recv_armed = 0;
		return 0;
	}
}

/* A receive completed: keep its bytes, or note EOF / error. */
static int recv_done(struct tcp_conn *c, int res)
{
	if (res > 0) {
		esd_tcp_rx_commit(c, (size_t)res);
		return 0;
	}
	if (res == 0 || res == -ECONNRESET) {
		c->eof = 1;
		return -ECONNRESET;
	}
	return res == -EAGAIN || res == -EINTR ? 0 : res;
}

static int uring_send(struct tcp_conn *c, struct iovec *iov, int n, int64_t deadline)
{
	struct uring_state *u = c->es;
	int rc;
	while (n > 0) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return esd_wire_fail(&c->w, -EBUSY, "io_uring: no submission entry");
		memset(&u->mh, 0, sizeof(u->mh));
		u->mh.msg_iov = iov;
		u->mh.msg_iovlen = (size_t)n;
		io_uring_prep_sendmsg(sqe, c->fd, &u->mh, MSG_NOSIGNAL | MSG_WAITALL);
		io_uring_sqe_set_data64(sqe, TAG_SEND);
		if (!u->recv_armed && !c->eof) {
			rc = arm_recv(c, 1);
			if (rc && rc != -ENOBUFS)
				return esd_wire_fail(&c->w, rc, "io_uring receive: %s",
				                     esd_strerror(rc));
		}
		rc = io_uring_submit(&u->ring);
		if (rc < 0)
			return esd_wire_fail(&c->w, rc, "io_uring submit: %s", esd_strerror(rc));
		int sent = -1;
		while (sent < 0) {
			uint64_t tag;
			int res;
			rc = reap(c, deadline, &tag, &res);
			if (rc == -ETIMEDOUT) {
				/* Take the send back before its buffers go away. */
				struct io_uring_sqe *cs = io_uring_get_sqe(&u->ring);
				if (cs) {
					io_uring_prep_cancel64(cs, TAG_SEND, 0);
					io_uring_sqe_set_data64(cs, 0);
					io_uring_submit(&u->ring);
				}
				while (sent < 0 && !reap(c, -1, &tag, &res)) {
					if (tag == TAG_SEND)
						sent = 0;
					else if (tag == TAG_RECV)
						recv_done(c, res); /* keep what arrived */
				}
				return esd_wire_fail(&c->w, -ETIMEDOUT,
				                     "tcp send to %s: peer reads nothing", c->w.peer);
			}
			if (rc)
				return esd_wire_fail(&c->w, rc, "io_uring wait: %s", esd_strerror(rc));
			if (tag == TAG_RECV) {
				rc = recv_done(c, res);
				if (rc && rc != -ECONNRESET)
					return esd_wire_fail(&c->w, rc, "tcp receive from %s: %s",
					                     c->w.peer, esd_strerror(rc));
				if (!c->eof) {
					rc = arm_recv(c, 1);
					if (rc == -ENOBUFS)
						continue; /* backlog full: just wait */
					if (rc)
						return esd_wire_fail(&c->w, rc, "io_uring receive: %s",
						                     esd_strerror(rc));
					io_uring_submit(&u->ring);
				}
			} else if (tag == TAG_SEND) {
				if (res < 0)
					return esd_wire_fail(&c->w, res, "tcp send to %s: %s",
					                     c->w.peer, esd_strerror(res));
				sent = res;
			}
		}
		size_t left = (size_t)sent;
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

static int uring_fill(struct tcp_conn *c, size_t want, int64_t deadline)
{
	struct uring_state *u = c->es;
	int rc;
	for (;;) {
		if (!u->recv_armed) {
			if ((rc = arm_recv(c, want)))
				return rc;
			if ((rc = io_uring_submit(&u->ring)) < 0)
				return rc;
		}
		uint64_t tag;
		int res;
		if ((rc = reap(c, deadline, &tag, &res)))
			return rc;
		if (tag != TAG_RECV)
			continue;
		rc = recv_done(c, res);
		if (rc || res > 0)
			return rc;
	}
}

const struct tcp_engine esd_tcp_engine_uring = {
    .name = "uring",
    .init = uring_init,
    .fini = uring_fini,
    .send = uring_send,
    .fill = uring_fill,
};
