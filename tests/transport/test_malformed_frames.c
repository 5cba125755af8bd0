/* Malformed frames from a raw socket: body lengths 0, max, max+1, 2^32-1,
 * a truncated body then close, a wrong version, an unknown op. Each is
 * answered with ERROR or closed within 1 s, and a well-behaved link to the
 * same peer keeps working throughout. */
#include "testutil.h"
#include "peer.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_BODY (64u << 10)

static struct peer p;
static struct esd_link *good;

static int raw_connect(void)
{
	char host[64];
	unsigned port;
	assert_int_equal(sscanf(p.addr, "%63[^:]:%u", host, &port), 2);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void hdr(uint8_t *h, uint8_t version, uint8_t op, uint32_t length)
{
	uint32_t magic = ESD_PROTO_MAGIC;
	memset(h, 0, ESD_FRAME_HDR_SIZE);
	memcpy(h, &magic, 4);
	h[4] = version;
	h[5] = op;
	memcpy(h + 8, &length, 4);
}

static void send_all(int fd, const void *p0, size_t len)
{
	const uint8_t *q = p0;
	while (len) {
		ssize_t w = send(fd, q, len, MSG_NOSIGNAL);
		if (w <= 0)
			return; /* the peer may close early: that is an answer too */
		q += w;
		len -= (size_t)w;
	}
}

/* Wait for an ERROR frame or the close; returns what happened. */
static const char *outcome(int fd, int64_t *elapsed)
{
	int64_t t0 = esd_now_ns();
	uint8_t buf[4096];
	size_t got = 0;
	const char *what = "nothing";
	for (;;) {
		int64_t left = t0 + 2 * ESD_NS_PER_S - esd_now_ns();
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&pfd, 1, (int)(left / ESD_NS_PER_MS) + 1) <= 0)
			break;
		ssize_t r = recv(fd, buf + got, sizeof(buf) - got, 0);
		if (r <= 0) {
			if (strcmp(what, "ERROR"))
				what = "closed";
			break;
		}
		got += (size_t)r;
		if (got >= ESD_FRAME_HDR_SIZE && buf[5] == ESD_OP_ERROR && strcmp(what, "ERROR")) {
			what = "ERROR";
			*elapsed = esd_now_ns() - t0;
			struct esd_msg m;
			uint32_t len;
			memcpy(&len, buf + 8, 4);
			if (got >= ESD_FRAME_HDR_SIZE + len &&
			    !esd_proto_decode(buf, ESD_FRAME_HDR_SIZE + len, NULL, &m, NULL, 0))
				printf("#   ERROR %d: %.*s\n", m.u.error.code, (int)m.u.error.len,
				       m.u.error.text);
			return what;
		}
		if (got == sizeof(buf))
			got = 0;
	}
	*elapsed = esd_now_ns() - t0;
	return what;
}

static void good_link_works(void)
{
	struct esd_buf b;
	struct esd_msg m;
	esd_key_t k = 42;
	esd_buf_init(&b);
	assert_int_equal(esd_enc_pull(&b, 1, 5, 0, &k, 1), 0);
	assert_int_equal(peer_send_buf(good, &b), 0);
	assert_int_equal(peer_expect(good, &m, ESD_OP_PULL_RESP, ESD_NS_PER_S), 0);
	assert_int_equal(m.u.rows.count, 1);
	esd_buf_free(&b);
}

static void check_case(const char *name, uint8_t version, uint8_t op, uint32_t length,
                       size_t body_sent, int close_after)
{
	int fd = raw_connect();
	uint8_t h[ESD_FRAME_HDR_SIZE];
	hdr(h, version, op, length);
	/* body_sent (size_t)-1: only part of the header, then close */
	send_all(fd, h, body_sent == (size_t)-1 ? 10 : sizeof(h));
	if (body_sent == (size_t)-1)
		body_sent = 0;
	if (body_sent) {
		uint8_t *body = calloc(1, body_sent);
		memset(body, 0xa5, body_sent);
		send_all(fd, body, body_sent);
		free(body);
	}
	if (close_after)
		shutdown(fd, SHUT_WR);
	int64_t dt = 0;
	const char *what = outcome(fd, &dt);
	printf("# %-28s -> %s after %.1f ms\n", name, what, esd_ns_to_ms(dt));
	assert_true(!strcmp(what, "ERROR") || !strcmp(what, "closed"));
	assert_true(dt < ESD_NS_PER_S);
	close(fd);
	good_link_works();
}

static void test_malformed(void **state)
{
	(void)state;
	check_case("PULL length 0", ESD_PROTO_VERSION, ESD_OP_PULL, 0, 0, 0);
	check_case("PULL length max (garbage)", ESD_PROTO_VERSION, ESD_OP_PULL, MAX_BODY, MAX_BODY,
	           0);
	check_case("PULL length max+1", ESD_PROTO_VERSION, ESD_OP_PULL, MAX_BODY + 1, 0, 0);
	check_case("PULL length max+4", ESD_PROTO_VERSION, ESD_OP_PULL, MAX_BODY + 4, 0, 0);
	check_case("PUSH_GRAD length 2^32-1", ESD_PROTO_VERSION, ESD_OP_PUSH_GRAD, UINT32_MAX, 64,
	           0);
	check_case("truncated body, then close", ESD_PROTO_VERSION, ESD_OP_PULL, 1024, 100, 1);
	check_case("header cut short, then close", ESD_PROTO_VERSION, ESD_OP_PULL, 0, (size_t)-1,
	           1);
	check_case("wrong version", ESD_PROTO_VERSION + 1, ESD_OP_BARRIER, 24, 24, 0);
	check_case("unknown op", ESD_PROTO_VERSION, 77, 0, 0, 0);
	check_case("link op without body", ESD_PROTO_VERSION, ESD_OP_LINK_ACK, 0, 0, 0);
}

static void test_garbage_stream(void **state)
{
	(void)state;
	/* Not even a frame: random bytes. */
	uint64_t rng = 99;
	for (int i = 0; i < 8; i++) {
		int fd = raw_connect();
		uint8_t junk[256];
		for (size_t j = 0; j < sizeof(junk); j++)
			junk[j] = (uint8_t)esd_test_rand(&rng);
		send_all(fd, junk, sizeof(junk));
		int64_t dt;
		const char *what = outcome(fd, &dt);
		assert_true(!strcmp(what, "ERROR") || !strcmp(what, "closed"));
		assert_true(dt < ESD_NS_PER_S);
		close(fd);
	}
	good_link_works();
}

static int setup(void **state)
{
	(void)state;
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.addr = "127.0.0.1:0";
	o.limits.max_body = MAX_BODY;
	if (peer_start(&p, &o))
		return -1;
	o.addr = p.addr;
	return esd_link_connect(&o, &good) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	esd_link_close(good);
	peer_stop(&p);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_malformed),
	    cmocka_unit_test(test_garbage_stream),
	};
	return cmocka_run_group_tests(tests, setup, teardown) ? 1 : 0;
}
