/* Heartbeats and the peer timeout on real tcp links (threads of this test,
 * loopback sockets):
 * - a busy peer, whose application thread is blocked for four peer
 *   timeouts before it answers, is not declared dead (plain, keyed, keyed
 *   with the reliable layer, whose heartbeats go beside the frames, and
 *   the poll engine);
 * - a silent peer (its socket open, nothing sent) is dead within the
 *   timeout: -ETIMEDOUT, the link broken, the error naming the peer;
 * - one frame held back on the path of a keyed link (a relay in this
 *   process forwards the rest) fails the next heartbeat's tag within a
 *   heartbeat interval or two.
 * Each case prints what it measured. */
#include "testutil.h"

#include <esd/auth.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/transport.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BEAT_NS    (50 * ESD_NS_PER_MS)
#define TIMEOUT_NS (400 * ESD_NS_PER_MS)

static struct esd_key key;

static void opts(struct esd_link_opts *o, const char *addr, bool keyed, bool reliable,
		 const char *engine)
{
	esd_link_opts_init(o);
	o->addr = addr;
	o->key = keyed ? &key : NULL;
	o->reliable = reliable;
	o->tcp_engine = engine;
	o->timeout_ns = 10 * ESD_NS_PER_S;
	o->heartbeat_ns = BEAT_NS;
	o->peer_timeout_ns = TIMEOUT_NS;
}

/* ---- a busy peer ---------------------------------------------------------- */

struct busy {
	struct esd_listener *ls;
	int64_t block_ns; /* the application thread's stall before it answers */
	int rc;
};

/* Take a HELLO, stall (a checkpoint write, a long solve), answer it. */
static void *busy_main(void *arg)
{
	struct busy *b = arg;
	struct esd_link *l;
	struct esd_msg m;
	struct esd_buf out;
	esd_buf_init(&out);
	b->rc = esd_listener_accept(b->ls, 5 * ESD_NS_PER_S, &l);
	if (!b->rc)
		b->rc = esd_link_recv(l, &m, 5 * ESD_NS_PER_S);
	if (!b->rc) {
		esd_sleep_ns(b->block_ns);
		struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 1};
		b->rc = esd_enc_hello(&out, &h, 1);
		if (!b->rc)
			b->rc = esd_link_send(l, out.data, out.len);
		/* the client closes first: wait for its end */
		if (!b->rc)
			esd_link_recv(l, &m, 5 * ESD_NS_PER_S);
	}
	if (!b->rc || b->rc == -ECONNRESET)
		esd_link_close(l);
	esd_buf_free(&out);
	return NULL;
}

static void busy_case(bool keyed, bool reliable, const char *engine)
{
	struct esd_link_opts o;
	char addr[64];
	struct busy b = {.block_ns = 4 * TIMEOUT_NS};
	opts(&o, "127.0.0.1:0", keyed, reliable, engine);
	assert_int_equal(esd_listener_open(&o, &b.ls), 0);
	assert_int_equal(esd_listener_addr(b.ls, addr, sizeof(addr)), 0);
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, busy_main, &b), 0);

	struct esd_link *l;
	opts(&o, addr, keyed, reliable, engine);
	assert_int_equal(esd_link_connect(&o, &l), 0);
	struct esd_buf out;
	struct esd_msg m;
	esd_buf_init(&out);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 0};
	assert_int_equal(esd_enc_hello(&out, &h, 0), 0);
	assert_int_equal(esd_link_send(l, out.data, out.len), 0);
	int64_t t0 = esd_now_ns();
	int rc = esd_link_recv(l, &m, 10 * ESD_NS_PER_S);
	double took = (double)(esd_now_ns() - t0) / 1e9;
	printf("# busy peer (%s%s%s): its answer after %.2f s (peer timeout %.1f s): %s\n",
	       keyed ? "keyed" : "plain", reliable ? ", reliable layer" : "",
	       engine ? ", poll engine" : "", took, (double)TIMEOUT_NS / 1e9,
	       rc ? esd_link_last_error(l) : "alive");
	assert_int_equal(rc, 0);
	assert_int_equal(m.hdr.op, ESD_OP_HELLO);
	assert_true(took >= 3.0 * (double)TIMEOUT_NS / 1e9);
	struct esd_link_stats st;
	esd_link_stats(l, &st);
	esd_link_close(l);
	pthread_join(t, NULL);
	assert_int_equal(b.rc, 0);
	esd_listener_close(b.ls);
	esd_buf_free(&out);
}

static void busy_plain(void **state)
{
	(void)state;
	busy_case(false, false, NULL);
}

static void busy_keyed(void **state)
{
	(void)state;
	busy_case(true, false, NULL);
}

static void busy_keyed_reliable(void **state)
{
	(void)state;
	busy_case(true, true, NULL);
}

static void busy_poll_engine(void **state)
{
	(void)state;
	busy_case(false, false, "poll");
}

/* ---- a silent peer ---------------------------------------------------------- */

static int listen_raw(char *addr, size_t len)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sa);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	snprintf(addr, len, "127.0.0.1:%u", ntohs(sa.sin_port));
	return fd;
}

static void silent_peer(void **state)
{
	(void)state;
	char addr[64];
	int lfd = listen_raw(addr, sizeof(addr));
	struct esd_link_opts o;
	struct esd_link *l;
	opts(&o, addr, false, false, NULL);
	assert_int_equal(esd_link_connect(&o, &l), 0);
	int fd = accept(lfd, NULL, NULL); /* open, and never a byte */
	assert_true(fd >= 0);
	struct esd_msg m;
	int64_t t0 = esd_now_ns();
	int rc = esd_link_recv(l, &m, 30 * ESD_NS_PER_S);
	double took = (double)(esd_now_ns() - t0) / 1e9;
	printf("# silent peer (socket open, nothing sent) -> dead: %.2f s (peer timeout %.1f s): "
	       "%s\n", took, (double)TIMEOUT_NS / 1e9, esd_link_last_error(l));
	assert_int_equal(rc, -ETIMEDOUT);
	assert_true(esd_link_broken(l));
	assert_non_null(strstr(esd_link_last_error(l), addr));
	assert_non_null(strstr(esd_link_last_error(l), "heard nothing"));
	assert_true(took >= 0.9 * (double)TIMEOUT_NS / 1e9 && took < 2.5);
	assert_int_equal(esd_link_recv(l, &m, 0), -EPIPE);
	esd_link_close(l);
	close(fd);
	close(lfd);
}

/* ---- a frame held back on the path ------------------------------------------ */

struct relay {
	int lfd;
	char upstream[64];
	int hold; /* the client's frame number held back (the handshake's count) */
	int64_t held_ns;
	volatile bool stop;
};

static int connect_raw(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(colon + 1)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* Client to server frame by frame, one held back; server to client as is. */
static void *relay_main(void *arg)
{
	struct relay *r = arg;
	int c = accept(r->lfd, NULL, NULL), s = connect_raw(r->upstream);
	static uint8_t buf[1 << 16];
	size_t have = 0;
	int n = 0;
	while (c >= 0 && s >= 0 && !r->stop) {
		struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = s, .events = POLLIN}};
		if (poll(p, 2, 50) <= 0)
			continue;
		if (p[1].revents) {
			uint8_t tmp[4096];
			ssize_t k = read(s, tmp, sizeof(tmp));
			if (k <= 0 || !write_all(c, tmp, (size_t)k))
				break;
		}
		if (!p[0].revents)
			continue;
		ssize_t k = read(c, buf + have, sizeof(buf) - have);
		if (k <= 0)
			break;
		have += (size_t)k;
		for (;;) {
			uint32_t blen;
			if (have < ESD_FRAME_HDR_SIZE)
				break;
			memcpy(&blen, buf + 8, 4);
			size_t fl = ESD_FRAME_HDR_SIZE + blen;
			if (have < fl)
				break;
			if (n++ == r->hold)
				r->held_ns = esd_now_ns();
			else if (!write_all(s, buf, fl))
				goto out;
			memmove(buf, buf + fl, have - fl);
			have -= fl;
		}
	}
out:
	if (c >= 0)
		close(c);
	if (s >= 0)
		close(s);
	return NULL;
}

static void *server_main(void *arg)
{
	struct busy *b = arg;
	struct esd_link *l;
	struct esd_msg m;
	b->rc = esd_listener_accept(b->ls, 5 * ESD_NS_PER_S, &l);
	if (b->rc)
		return NULL;
	do
		b->rc = esd_link_recv(l, &m, 10 * ESD_NS_PER_S);
	while (!b->rc);
	b->block_ns = esd_now_ns(); /* when the link failed */
	printf("# server link: %s\n", esd_link_last_error(l));
	esd_link_close(l);
	return NULL;
}

static void withheld_keyed(void **state)
{
	(void)state;
	struct esd_link_opts o;
	struct busy b = {0};
	struct relay r = {.hold = 2}; /* the handshake's two, then the first frame */
	opts(&o, "127.0.0.1:0", true, false, NULL);
	assert_int_equal(esd_listener_open(&o, &b.ls), 0);
	assert_int_equal(esd_listener_addr(b.ls, r.upstream, sizeof(r.upstream)), 0);
	char addr[64];
	r.lfd = listen_raw(addr, sizeof(addr));
	pthread_t ts, tr;
	assert_int_equal(pthread_create(&ts, NULL, server_main, &b), 0);
	assert_int_equal(pthread_create(&tr, NULL, relay_main, &r), 0);

	struct esd_link *l;
	opts(&o, addr, true, false, NULL);
	assert_int_equal(esd_link_connect(&o, &l), 0);
	struct esd_buf out;
	esd_buf_init(&out);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 0};
	assert_int_equal(esd_enc_hello(&out, &h, 0), 0);
	assert_int_equal(esd_link_send(l, out.data, out.len), 0);
	pthread_join(ts, NULL);
	double took = (double)(b.block_ns - r.held_ns) / 1e9;
	printf("# keyed link, one frame held back on the path -> the server's link fails: "
	       "%.2f s (heartbeat %.2f s)\n", took, (double)BEAT_NS / 1e9);
	assert_int_equal(b.rc, -EACCES);
	assert_true(r.held_ns > 0 && took < 2.0 * (double)TIMEOUT_NS / 1e9);
	r.stop = true;
	esd_link_close(l);
	pthread_join(tr, NULL);
	close(r.lfd);
	esd_listener_close(b.ls);
	esd_buf_free(&out);
}

int main(void)
{
	memset(key.b, 0x5a, sizeof(key.b));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(busy_plain),
		cmocka_unit_test(busy_keyed),
		cmocka_unit_test(busy_keyed_reliable),
		cmocka_unit_test(busy_poll_engine),
		cmocka_unit_test(silent_peer),
		cmocka_unit_test(withheld_keyed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
