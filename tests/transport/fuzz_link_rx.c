/*
 * libFuzzer target for a keyed link's whole receive path before and
 * during the job key handshake: the input is the bytes a stranger without
 * the key writes on a real loopback tcp connection to a listener of this
 * process, and the accepted link reads them as any shard does (the tcp
 * backend's framing, the reliable layer where it would start, the
 * handshake's parser, the decoder). The first byte picks when they come:
 *
 *   even  from the connection's first byte;
 *   odd   after a well-formed first handshake step (LINK_AUTH step 1),
 *         so the link waits for the client's proof.
 *
 * Whatever the bytes, nothing may reach the application (esd_link_recv
 * returning a frame aborts), no reliable layer may run, and the wire may
 * take no frame larger than a handshake's before the handshake is done.
 * Built with -DESD_FUZZ=ON and clang; the corpus (corpus_link_rx/)
 * replays as test_fuzz_link_rx_corpus in every build.
 */
#include "link_internal.h"

#include <esd/clock.h>
#include <esd/proto.h>
#include <esd/transport.h>

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT  (64u << 10)
#define RECV_TRIES 40

static struct esd_listener *lis;
static struct esd_key key;
static int port;

/* The listener, once per process (a fixed key: a stranger does not have it). */
static void setup(void)
{
	struct esd_link_opts o;
	char addr[64];
	esd_link_opts_init(&o);
	memset(key.b, 0x5a, sizeof(key.b));
	o.key = &key;
	o.addr = "127.0.0.1:0";
	o.timeout_ns = 200 * ESD_NS_PER_MS;
	o.peer_timeout_ns = 200 * ESD_NS_PER_MS;
	if (esd_listener_open(&o, &lis) || esd_listener_addr(lis, addr, sizeof(addr)))
		abort();
	port = atoi(strrchr(addr, ':') + 1);
}

static int dial(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		abort();
	return fd;
}

/* Write what fits without blocking (the link reads only after). */
static void put(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void put_step1(int fd)
{
	struct esd_buf b;
	uint8_t nc[32];
	memset(nc, 0x11, sizeof(nc));
	esd_buf_init(&b);
	if (esd_enc_link_auth(&b, 1, ESD_SUITE_CHACHA20_POLY1305 | ESD_SUITE_AES256_GCM, nc, NULL))
		abort();
	put(fd, b.data, b.len);
	esd_buf_free(&b);
}

/* The link's state may never be past what the handshake allows. */
static void check_bounds(const struct esd_link *l)
{
	if (l->auth->state == AUTH_OPEN)
		abort(); /* the key was guessed */
	if (l->rel || l->w->lim.max_body > PRE_AUTH_MAX_BODY ||
	    l->w->rx_backlog_max > PRE_AUTH_BACKLOG)
		abort(); /* more than the handshake runs */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct esd_link *l;
	struct esd_msg m;
	if (!lis)
		setup();
	if (!size)
		return 0;
	int during = data[0] & 1;
	data++;
	size--;
	if (size > MAX_INPUT)
		size = MAX_INPUT;
	int fd = dial();
	if (esd_listener_accept(lis, ESD_NS_PER_S, &l))
		abort();
	if (during)
		put_step1(fd);
	put(fd, data, size);
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < RECV_TRIES; i++) {
		check_bounds(l);
		int rc = esd_link_recv(l, &m, 20 * ESD_NS_PER_MS);
		if (!rc)
			abort(); /* a frame of a stranger reached the application */
		if (rc != -ETIMEDOUT || esd_link_broken(l))
			break;
	}
	esd_link_close(l);
	close(fd);
	return 0;
}
