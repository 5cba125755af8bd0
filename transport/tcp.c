/*
 * The tcp backend (the default): sockets, addresses, connection setup with
 * timeouts and dead-peer detection (keepalive, TCP_USER_TIMEOUT), and the
 * framing of the byte stream: a stream buffer that holds received bytes
 * until whole frames are there, checking each header against the limits
 * before the buffer grows for its body. The bytes themselves are moved by
 * an engine: io_uring (tcp_uring.c) when built, else poll(2) (tcp_poll.c).
 */
#include "tcp_internal.h"

#include <esd_build_config.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <arpa/inet.h>
#include <assert.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SB_MIN  (1u << 20)   /* smallest stream buffer */
#define RX_ROOM (256u << 10) /* free room worth a receive call */

static size_t sb_steady(const struct tcp_conn *c);

struct tcp_listener {
	struct wire_listener wl;
	int fd;
};

static int parse_addr(const char *addr, int passive, struct addrinfo **res, char *err,
                      size_t errlen)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	if (!colon || colon == addr || !colon[1] || (size_t)(colon - addr) >= sizeof(host)) {
		snprintf(err, errlen, "tcp address '%s': expected host:port", addr);
		return -EINVAL;
	}
	size_t hl = (size_t)(colon - addr);
	memcpy(host, addr, hl);
	host[hl] = 0;
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = 0;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	if (passive)
		hints.ai_flags = AI_PASSIVE;
	int g = getaddrinfo(host, colon + 1, &hints, res);
	if (g) {
		snprintf(err, errlen, "tcp address '%s': %s", addr, gai_strerror(g));
		return -EINVAL;
	}
	return 0;
}

static void name_of(const struct sockaddr *sa, char *buf, size_t len)
{
	char h[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		inet_ntop(AF_INET, &s->sin_addr, h, sizeof(h));
		port = ntohs(s->sin_port);
		snprintf(buf, len, "%s:%u", h, port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, h, sizeof(h));
		port = ntohs(s->sin6_port);
		snprintf(buf, len, "[%s]:%u", h, port);
	} else {
		snprintf(buf, len, "?");
	}
}

static void tune_socket(int fd, int64_t timeout_ns)
{
	int one = 1;
	unsigned ms = (unsigned)(timeout_ns / ESD_NS_PER_MS);
	int idle = (int)(timeout_ns / ESD_NS_PER_S) > 0 ? (int)(timeout_ns / ESD_NS_PER_S) : 1;
	int intvl = 1, cnt = 3;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
}

static const struct tcp_engine *pick_engine(const struct esd_link_opts *o, char *err, size_t errlen)
{
	const char *e = o->tcp_engine;
	if (!e || !strcmp(e, "uring")) {
#if ESD_BUILT_URING
		return &esd_tcp_engine_uring;
#else
		if (e) {
			snprintf(err, errlen, "tcp engine 'uring': not built: " ESD_WHY_URING);
			return NULL;
		}
		return &esd_tcp_engine_poll;
#endif
	}
	if (!strcmp(e, "poll"))
		return &esd_tcp_engine_poll;
	snprintf(err, errlen, "tcp engine '%s': expected uring or poll", e);
	return NULL;
}

static int conn_wrap(const struct esd_link_opts *o, int fd, struct wire **out)
{
	char err[WIRE_ERR_LEN];
	const struct tcp_engine *eng = pick_engine(o, err, sizeof(err));
	if (!eng) {
		ESD_ERR("transport", "%s", err);
		close(fd);
		return -ENOTSUP;
	}
	struct tcp_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	esd_wire_init(&c->w, &esd_wire_tcp, o);
	c->fd = fd;
	c->eng = eng;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (!getpeername(fd, (struct sockaddr *)&ss, &sl))
		name_of((struct sockaddr *)&ss, c->w.peer, sizeof(c->w.peer));
	c->steady = sb_steady(c);
	tune_socket(fd, c->w.timeout_ns);
	int rc = eng->init(c);
	if (rc) {
		ESD_ERR("transport", "tcp %s engine: %s", eng->name, esd_strerror(rc));
		close(fd);
		free(c);
		return rc;
	}
	*out = &c->w;
	return 0;
}

static int tcp_connect(const struct esd_link_opts *o, struct wire **out)
{
	char err[WIRE_ERR_LEN];
	struct addrinfo *res;
	int rc = parse_addr(o->addr, 0, &res, err, sizeof(err));
	if (rc) {
		ESD_ERR("transport", "%s", err);
		return rc;
	}
	int64_t timeout = o->timeout_ns > 0 ? o->timeout_ns : 5 * ESD_NS_PER_S;
	int64_t deadline = esd_now_ns() + timeout;
	int fd = -1;
	for (;;) {
		rc = -ECONNREFUSED;
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
			fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			            ai->ai_protocol);
			if (fd < 0) {
				rc = esd_neg_errno();
				continue;
			}
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
				rc = esd_neg_errno();
				close(fd);
				fd = -1;
				continue;
			}
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};
			int64_t left = deadline - esd_now_ns();
			int pr = poll(&pfd, 1, left > 0 ? (int)(left / ESD_NS_PER_MS) + 1 : 0);
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			if (pr == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) &&
			    !soerr) {
				rc = 0;
				break;
			}
			rc = pr == 0 ? -ETIMEDOUT : soerr ? -soerr : esd_neg_errno();
			close(fd);
			fd = -1;
		}
		/* A PS that is still starting refuses: retry until the deadline. */
		if (rc != -ECONNREFUSED || esd_now_ns() + 20 * ESD_NS_PER_MS > deadline)
			break;
		esd_sleep_ns(20 * ESD_NS_PER_MS);
	}
	freeaddrinfo(res);
	if (rc) {
		ESD_ERR("transport", "tcp connect to %s: %s", o->addr, esd_strerror(rc));
		return rc;
	}
	return conn_wrap(o, fd, out);
}

static int tcp_listen(const struct esd_link_opts *o, struct wire_listener **out)
{
	char err[WIRE_ERR_LEN];
	struct addrinfo *res;
	int rc = parse_addr(o->addr, 1, &res, err, sizeof(err));
	if (rc) {
		ESD_ERR("transport", "%s", err);
		return rc;
	}
	struct tcp_listener *tl = calloc(1, sizeof(*tl));
	if (!tl) {
		rc = -ENOMEM;
		goto err_free_addr;
	}
	tl->wl.ops = &esd_wire_tcp;
	tl->fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (tl->fd < 0) {
		rc = esd_neg_errno();
		goto err_free_listener;
	}
	int one = 1;
	setsockopt(tl->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(tl->fd, res->ai_addr, res->ai_addrlen) || listen(tl->fd, 256)) {
		rc = esd_neg_errno();
		goto err_close_fd;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	getsockname(tl->fd, (struct sockaddr *)&ss, &sl);
	name_of((struct sockaddr *)&ss, tl->wl.addr, sizeof(tl->wl.addr));
	freeaddrinfo(res);
	*out = &tl->wl;
	return 0;

err_close_fd:
	close(tl->fd);
err_free_listener:
	free(tl);
err_free_addr:
	freeaddrinfo(res);
	ESD_ERR("transport", "tcp listen on %s: %s", o->addr, esd_strerror(rc));
	return rc;
}

static int tcp_accept(struct wire_listener *wl, const struct esd_link_opts *o, int64_t deadline,
                      struct wire **out)
{
	struct tcp_listener *tl = (struct tcp_listener *)wl;
	for (;;) {
		int fd = accept4(tl->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			return conn_wrap(o, fd, out);
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			return esd_neg_errno();
		struct pollfd pfd = {.fd = tl->fd, .events = POLLIN};
		int64_t left = deadline < 0 ? -1 : deadline - esd_now_ns();
		if (deadline >= 0 && left <= 0)
			return -ETIMEDOUT;
		int ms = left < 0 ? -1 : (int)((left + ESD_NS_PER_MS - 1) / ESD_NS_PER_MS);
		if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
			return esd_neg_errno();
	}
}

static void tcp_listener_close(struct wire_listener *wl)
{
	struct tcp_listener *tl = (struct tcp_listener *)wl;
	close(tl->fd);
	free(tl);
}

/* ---- stream buffer ------------------------------------------------------ */

/* The most the buffer may hold: what arrives while a send waits (the
 * backlog) and one frame. It grows that far only while the bytes are
 * really there. */
static size_t sb_limit(const struct tcp_conn *c)
{
	return c->w.rx_backlog_max + ESD_FRAME_HDR_SIZE + c->w.lim.max_body;
}

/* The buffer's steady size: room for two of the largest frames the link
 * has received (the one lent out and the next, whole), at least SB_MIN,
 * at most the limit. Memory figures: bench/results/soak.md. */
static size_t sb_steady(const struct tcp_conn *c)
{
	size_t limit = sb_limit(c), cap = SB_MIN;
	while (cap < 2 * c->max_frame && cap < limit)
		cap *= 2;
	return cap < limit ? cap : limit;
}

/* A buffer of cap bytes: the spare when it fits, else a new one. */
static uint8_t *sb_alloc(struct tcp_conn *c, size_t cap)
{
	if (c->spare && cap == c->steady) {
		uint8_t *b = c->spare;
		c->spare = NULL;
		return b;
	}
	return malloc(cap);
}

/* Done with a buffer: kept as the spare when it has the steady size and
 * there is none, else freed. Accepts NULL. */
static void sb_release(struct tcp_conn *c, uint8_t *b, size_t cap)
{
	if (b && cap == c->steady && !c->spare)
		c->spare = b;
	else
		free(b);
}

/* The frame the last recv returned is lent out and stays where it is: the
 * bytes after it go to a buffer of cap bytes, the old one is retired until
 * the next recv. Only what is still unread is copied, so a lent frame never
 * makes the buffer grow by itself. */
static int sb_move_lent(struct tcp_conn *c, size_t cap)
{
	size_t from = c->head + c->consumed, live = c->tail - from;
	uint8_t *nb = sb_alloc(c, cap);
	if (!nb)
		return -ENOMEM;
	memcpy(nb, c->sb + from, live);
	assert(!c->retired); /* recv released it before lending this frame */
	c->retired = c->sb;
	c->retired_cap = c->cap;
	c->sb = nb;
	c->cap = cap;
	c->head = c->consumed = 0;
	c->tail = live;
	c->lent = 0;
	return 0;
}

/* Nothing is lent: the unread bytes go to the front of a buffer of cap
 * bytes, in place when it keeps its size. */
static int sb_compact(struct tcp_conn *c, size_t cap)
{
	size_t live = c->tail - c->head;
	if (cap == c->cap) {
		memmove(c->sb, c->sb + c->head, live);
	} else {
		uint8_t *nb = sb_alloc(c, cap);
		if (!nb)
			return -ENOMEM;
		if (live)
			memcpy(nb, c->sb + c->head, live);
		sb_release(c, c->sb, c->cap);
		c->sb = nb;
		c->cap = cap;
	}
	c->head = 0;
	c->tail = live;
	return 0;
}

/* A frame larger than any before: the steady size follows it (the spare,
 * of the old size, goes). */

/* The steady size follows the largest frame and the limits (a keyed
 * link's grow when its handshake is done); the spare of the old size
 * goes. */
static void limits_follow(struct tcp_conn *c)
{
	size_t steady = sb_steady(c);
	if (steady != c->steady) {
		c->steady = steady;
		free(c->spare);
		c->spare = NULL;
	}
}

/* A frame larger than any before. */
static void note_frame(struct tcp_conn *c, size_t len)
{
	c->max_frame = len;
	limits_follow(c);
}

int esd_tcp_rx_space(struct tcp_conn *c, size_t want, uint8_t **p, size_t *n)
{
	limits_follow(c);
	/* Aim for RX_ROOM at least: a receive of a few bytes costs a call
	 * each. */
	size_t target = want > RX_ROOM ? want : RX_ROOM;
	size_t from = c->head + (c->lent ? c->consumed : 0), live = c->tail - from;
	int shrink = !c->lent && c->cap > c->steady && live + target <= c->steady;
	if (c->cap - c->tail < target || shrink) {
		size_t limit = sb_limit(c), cap = c->steady;
		while (cap < live + target && cap < limit)
			cap *= 2;
		if (cap > limit)
			cap = limit;
		int rc = 0;
		if (from || cap != c->cap) /* else full at the limit: wait */
			rc = c->lent ? sb_move_lent(c, cap) : sb_compact(c, cap);
		if (rc)
			return rc;
	}
	*p = c->sb + c->tail;
	*n = c->cap - c->tail;
	return 0;
}

void esd_tcp_rx_commit(struct tcp_conn *c, size_t n)
{
	c->tail += n;
	esd_wire_heard(&c->w);
}

static int tcp_send(struct wire *w, const struct iovec *iov, int n, int64_t deadline)
{
	struct tcp_conn *c = (struct tcp_conn *)w;
	struct iovec v[256]; /* a sendv gives a piece or two a row */
	if (c->dead)
		return esd_wire_fail(w, -EPIPE, "tcp link to %s is broken", w->peer);
	while (n > 0) {
		int k = n < 256 ? n : 256;
		memcpy(v, iov, sizeof(*v) * (size_t)k);
		int rc = c->eng->send(c, v, k, deadline);
		if (rc) {
			c->dead = 1;
			return rc;
		}
		iov += k;
		n -= k;
	}
	return 0;
}

/* The bytes of the frame at head (need in all) that have arrived, up to
 * its tag, hashed into c->run while they are still in the cache: the
 * check then only finishes the hash (auth.c). */
static void rx_hash_more(struct tcp_conn *c, size_t avail, size_t need)
{
	if (!c->run_tried) {
		c->run_tried = 1;
		c->run_on = esd_wire_rx_run_start(&c->w, &c->run, c->sb + c->head, need);
		c->run_at = ESD_FRAME_HDR_SIZE;
	}
	if (!c->run_on)
		return;
	size_t end = need - AUTH_TAG_BYTES < avail ? need - AUTH_TAG_BYTES : avail;
	if (end > c->run_at) {
		esd_gmac_run_add(c->w.rx_mac, &c->run, c->sb + c->head + c->run_at, end - c->run_at,
				 NULL);
		c->run_at = end;
	}
}

static int tcp_recv(struct wire *w, const uint8_t **frame, size_t *len, int64_t deadline)
{
	struct tcp_conn *c = (struct tcp_conn *)w;
	w->rx_run = NULL;
	c->head += c->consumed;
	c->consumed = 0;
	c->lent = 0;
	sb_release(c, c->retired, c->retired_cap);
	c->retired = NULL;
	if (c->rx_dead)
		return esd_wire_fail(w, -EPIPE, "tcp link to %s is broken", w->peer);
	for (;;) {
		size_t avail = c->tail - c->head;
		size_t need = ESD_FRAME_HDR_SIZE;
		if (avail >= ESD_FRAME_HDR_SIZE) {
			struct esd_frame_hdr h;
			int rc = esd_frame_hdr_parse(c->sb + c->head, avail, &w->lim, &h, w->err,
			                             sizeof(w->err));
			if (rc) {
				c->rx_dead = 1;
				return rc;
			}
			need += h.length;
			if (need > c->max_frame)
				note_frame(c, need);
			if (w->rx_mac)
				rx_hash_more(c, avail, need);
			if (avail >= need) {
				*frame = c->sb + c->head;
				*len = need;
				c->consumed = need;
				c->lent = 1;
				if (c->run_on) {
					w->rx_run = &c->run;
					w->rx_run_frame = *frame;
				}
				c->run_on = c->run_tried = 0;
				return 0;
			}
		}
		if (c->eof) {
			c->rx_dead = 1;
			if (avail)
				return esd_wire_fail(w, -ECONNRESET,
				                     "peer %s closed mid-frame (%zu of %zu bytes)",
				                     w->peer, avail, need);
			return esd_wire_fail(w, -ECONNRESET, "peer %s closed the link", w->peer);
		}
		int rc = c->eng->fill(c, need - avail, deadline);
		if (rc == -ETIMEDOUT)
			return rc;
		if (rc == -ECONNRESET) {
			c->eof = 1;
			continue;
		}
		if (rc) {
			c->rx_dead = 1;
			if (rc == -ENOMEM || rc == -ENOBUFS)
				return esd_wire_fail(w, rc, "no memory for a %zu-byte frame", need);
			return esd_wire_fail(w, rc, "tcp receive from %s: %s", w->peer,
			                     esd_strerror(rc));
		}
	}
}

/* A heartbeat from the heartbeat thread: written at once, or -EAGAIN with
 * nothing written (the socket is full). A write cut short (the buffer
 * had a few bytes of room) is finished before the lock goes: the stream
 * must stay whole frames. The link's own thread may be receiving; nothing
 * of the receive side is touched. */
static int tcp_beat(struct wire *w, const uint8_t *frame, size_t len)
{
	struct tcp_conn *c = (struct tcp_conn *)w;
	int64_t deadline = esd_now_ns() + w->timeout_ns;
	size_t off = 0;
	if (c->dead)
		return -EPIPE;
	while (off < len) {
		ssize_t r = send(c->fd, frame + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r > 0) {
			off += (size_t)r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno != EAGAIN) {
			c->dead = 1;
			return esd_neg_errno();
		}
		if (!off)
			return -EAGAIN;
		int64_t left = deadline - esd_now_ns();
		if (left <= 0) {
			c->dead = 1; /* half a frame out: nothing may follow */
			return -ETIMEDOUT;
		}
		struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
		poll(&pfd, 1, (int)(left / ESD_NS_PER_MS) + 1);
	}
	return 0;
}

/* From any thread: the socket shut both ways, so a receive in progress
 * (poll or io_uring) sees the end at once. */
static void tcp_abort(struct wire *w)
{
	shutdown(((struct tcp_conn *)w)->fd, SHUT_RDWR);
}

static void tcp_close(struct wire *w, int64_t deadline)
{
	struct tcp_conn *c = (struct tcp_conn *)w;
	/* Half-close, then read until the peer closes too (briefly): closing
	 * with unread data would reset the connection and could destroy what
	 * we sent last (an ERROR reply) before the peer reads it. */
	shutdown(c->fd, SHUT_WR);
	c->eng->fini(c);
	int64_t linger = esd_now_ns() + 100 * ESD_NS_PER_MS;
	if (deadline < 0 || deadline > linger)
		deadline = linger;
	for (;;) {
		char junk[4096];
		ssize_t r = recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (r > 0)
			continue;
		int64_t left = deadline - esd_now_ns();
		if (left <= 0)
			break;
		struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
		poll(&pfd, 1, (int)(left / ESD_NS_PER_MS) + 1);
	}
	close(c->fd);
	free(c->sb);
	free(c->retired);
	free(c->spare);
	esd_bufcache_fini(&c->w.cache);
	free(c);
}

const struct wire_ops esd_wire_tcp = {
    .name = "tcp",
    .not_built = NULL,
    .connect = tcp_connect,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .listener_close = tcp_listener_close,
    .send = tcp_send,
    .sendv = tcp_send, /* a byte stream: pieces are frames too */
    .recv = tcp_recv,
    .close = tcp_close,
    .beat = tcp_beat,
    .abort = tcp_abort,
};
