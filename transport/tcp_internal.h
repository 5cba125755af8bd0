/*
 * Private to the tcp backend: the connection object and the engines that
 * move its bytes (tcp_uring.c: io_uring, one ring per link; tcp_poll.c:
 * poll(2)). tcp.c owns sockets, framing and the receive stream buffer.
 */
#ifndef ESD_TRANSPORT_TCP_INTERNAL_H
#define ESD_TRANSPORT_TCP_INTERNAL_H

#include "link_internal.h"

struct tcp_conn;

struct tcp_engine {
	const char *name;
	int (*init)(struct tcp_conn *c);
	void (*fini)(struct tcp_conn *c);
	/* Write every byte of iov (n entries, modified freely); while the
	 * socket is full, read what the peer sends into the stream buffer. */
	int (*send)(struct tcp_conn *c, struct iovec *iov, int n, int64_t deadline_ns);
	/* Read at least one byte into the stream buffer, with room for want
	 * more bytes (esd_tcp_rx_space / esd_tcp_rx_commit), or fail: -ETIMEDOUT,
	 * -ECONNRESET (EOF), -errno. A read the engine left in flight (io_uring)
	 * completes first: the buffer never moves under a pending read. */
	int (*fill)(struct tcp_conn *c, size_t want, int64_t deadline_ns);
};

struct tcp_conn {
	struct wire w;
	int fd;
	int dead;    /* sending is impossible (error, half-written frame) */
	int rx_dead; /* the receive stream lost sync (bad header, EOF) */
	int eof;
	const struct tcp_engine *eng;
	void *es; /* engine state */
	/* Receive stream buffer: bytes [head, tail) not yet consumed. A frame
	 * handed out by recv (lent) stays in place until the next recv; moving
	 * the bytes after it meanwhile keeps the old buffer in retired. The
	 * buffer returns to its steady size (sized by the largest frame seen)
	 * once what it holds fits again; spare is a steady-size buffer kept
	 * for those moves (or NULL). */
	uint8_t *sb;
	size_t cap, head, tail, consumed;
	uint8_t *retired, *spare;
	size_t retired_cap;
	size_t steady, max_frame;
	int lent;
	/* A keyed link's frame at head hashed as its bytes land (the wire's
	 * rx_mac, wire.c): run_at bytes of it are in run; run_on when it is
	 * hashed, run_tried once that was decided for this frame. */
	struct gmac_run run;
	size_t run_at;
	int run_on, run_tried;
};

extern const struct tcp_engine esd_tcp_engine_poll;
extern const struct tcp_engine esd_tcp_engine_uring; /* only with ESD_HAVE_URING */

/* Free room at the tail of the stream buffer: at least want bytes (the
 * rest of a frame; 1 = any) when the backlog limit allows, less otherwise
 * (0 = full). The buffer may move or shrink: call it only while no receive
 * is in flight. */
int esd_tcp_rx_space(struct tcp_conn *c, size_t want, uint8_t **p, size_t *n);
void esd_tcp_rx_commit(struct tcp_conn *c, size_t n);

#endif
