/* The job key on real tcp links between processes (this test and a forked
 * peer): key files (mode, format, no overwrite); keyed round trips; a
 * client without the key, with another key, or a keyed client against a
 * keyless peer, refused and told nothing; and an attacker on the path (a
 * relay in this process that alters, replays, reorders or injects one
 * frame) detected by the receiver, which answers ERROR and closes. */
#include "testutil.h"
#include "peer.h"

#include <esd/auth.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir;
static struct esd_key key_a, key_b;

static void key_files(void **state)
{
	(void)state;
	char path[512], bad[512];
	snprintf(path, sizeof(path), "%s/job.key", dir);
	assert_int_equal(esd_key_create(path), 0);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(esd_key_create(path), -EEXIST); /* never replaced */
	assert_int_equal(esd_key_load(path, &key_a), 0);
	chmod(path, 0640);
	assert_int_equal(esd_key_load(path, &key_b), -EPERM);
	chmod(path, 0600);
	snprintf(bad, sizeof(bad), "%s/short.key", dir);
	assert_int_equal(esd_test_write_file(bad, "abcd\n", 5), 0);
	chmod(bad, 0600);
	assert_int_equal(esd_key_load(bad, &key_b), -EINVAL);
	snprintf(bad, sizeof(bad), "%s/b.key", dir);
	assert_int_equal(esd_key_create(bad), 0);
	assert_int_equal(esd_key_load(bad, &key_b), 0);
	assert_memory_not_equal(key_a.b, key_b.b, ESD_KEY_BYTES);
	snprintf(bad, sizeof(bad), "%s/absent.key", dir);
	assert_int_equal(esd_key_load(bad, &key_b), -ENOENT);
	assert_int_equal(esd_key_load(path, &key_b), 0); /* b: a second holder of a */
}

static void start_peer(struct peer *p, const struct esd_key *k)
{
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.addr = "127.0.0.1:0";
	o.key = k;
	assert_int_equal(peer_start(p, &o), 0);
}

static int connect_to(const char *addr, const struct esd_key *k, struct esd_link **l)
{
	struct esd_link_opts o;
	esd_link_opts_init(&o);
	o.addr = addr;
	o.key = k;
	o.timeout_ns = 2 * ESD_NS_PER_S;
	return esd_link_connect(&o, l);
}

static void hello_round_trip(struct esd_link *l, uint32_t worker)
{
	struct esd_buf b;
	struct esd_msg m;
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = worker, .job_token = 7};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_HELLO, 2 * ESD_NS_PER_S), 0);
	assert_int_equal(m.u.hello.worker, worker);
	esd_key_t keys[200];
	for (uint32_t i = 0; i < 200; i++)
		keys[i] = 1000 + i;
	assert_int_equal(esd_enc_pull(&b, 1, 3, worker, keys, 200), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 2 * ESD_NS_PER_S), 0);
	assert_int_equal(m.u.rows.count, 200);
	esd_buf_free(&b);
}

/* Five round trips over a link whose client offers only suites (the
 * names of ESD_AUTH_SUITES). */
static void rounds_offering(const struct peer *p, const char *suites)
{
	struct esd_link *l;
	setenv("ESD_AUTH_SUITES", suites, 1);
	assert_int_equal(connect_to(p->addr, &key_a, &l), 0);
	unsetenv("ESD_AUTH_SUITES");
	for (uint32_t w = 0; w < 5; w++)
		hello_round_trip(l, w);
	esd_link_close(l);
}

static void keyed_round_trips(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	start_peer(&p, &key_a);
	assert_int_equal(connect_to(p.addr, &key_b, &l), 0); /* the same key, loaded twice */
	for (uint32_t w = 0; w < 50; w++)
		hello_round_trip(l, w);
	esd_link_close(l);
	/* a client that offers ChaCha20-Poly1305 only: the server goes along */
	rounds_offering(&p, "chacha20-poly1305");
	/* a client that offers no NH-GMAC (as one built before it): the
	 * server goes along with AES-256-GCM */
	rounds_offering(&p, "aes256-gcm");
	/* AES-256-GCM by libsodium here, by gmac.c in the peer (where the CPU
	 * has it): the same tags */
	setenv("ESD_NO_VPCLMUL", "1", 1);
	assert_int_equal(connect_to(p.addr, &key_a, &l), 0);
	for (uint32_t w = 0; w < 5; w++)
		hello_round_trip(l, w);
	esd_link_close(l);
	unsetenv("ESD_NO_VPCLMUL");
	peer_stop(&p);
}

/* Frames tagged in the encoder's buffer (esd_link_tag_in_place) are
 * checked by the peer as sealed ones are: two PULLs in one buffer, each
 * answered; a buffer not marked is refused before anything is sent; without
 * the wide tags the link says so and the usual send goes on. */
static void tagged_in_place(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	esd_key_t keys[300];
	for (uint32_t i = 0; i < 300; i++)
		keys[i] = 5000 + i;
	esd_buf_init(&b);
	start_peer(&p, &key_a);
	assert_int_equal(connect_to(p.addr, &key_b, &l), 0);
	hello_round_trip(l, 0);
	if (!esd_link_can_tag_in_place(l)) {
		print_message("this CPU has no VPCLMULQDQ: in-place tags not taken here\n");
		assert_int_equal(esd_enc_pull(&b, 1, 4, 0, keys, 3), 0);
		assert_int_equal(esd_link_tag_in_place(l, &b, 0), -ENOTSUP);
	} else {
		for (int round = 0; round < 3; round++) {
			esd_buf_reset(&b);
			assert_int_equal(esd_enc_pull(&b, 1, 4, 0, keys, 300), 0);
			assert_int_equal(esd_link_tag_in_place(l, &b, 0), 0);
			size_t second = b.len;
			assert_int_equal(esd_enc_pull(&b, 1, 5, 0, keys + 7, 1), 0);
			assert_int_equal(esd_link_tag_in_place(l, &b, second), 0);
			assert_int_equal(esd_link_send_tagged(l, &b), 0);
			assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 2 * ESD_NS_PER_S), 0);
			assert_int_equal(m.u.rows.count, 300);
			assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 2 * ESD_NS_PER_S), 0);
			assert_int_equal(m.u.rows.count, 1);
			/* tagged in place and sealed frames interleave on one counter */
			hello_round_trip(l, (uint32_t)round);
		}
		esd_buf_reset(&b);
		assert_int_equal(esd_enc_pull(&b, 1, 6, 0, keys, 2), 0);
		assert_int_equal(esd_link_send_tagged(l, &b), -EINVAL); /* not marked */
		hello_round_trip(l, 9); /* nothing was sent: the link goes on */
	}
	esd_link_close(l);
	setenv("ESD_NO_VPCLMUL", "1", 1);
	assert_int_equal(connect_to(p.addr, &key_a, &l), 0);
	unsetenv("ESD_NO_VPCLMUL");
	assert_int_equal(esd_link_can_tag_in_place(l), 0);
	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

/* Frames given in pieces (esd_link_sendv) on a keyed link that tags in
 * place are copied once and tagged there: two PULLs cut at odd places
 * (the first longer than a hashing window),
 * the second starting inside the piece that ends the first, each
 * answered; sealed frames go on after them on the one counter. */
static void pieces_tagged_on_the_way(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	struct esd_buf b;
	struct esd_msg m;
	static esd_key_t keys[3000]; /* a frame over one hashing window */
	for (uint32_t i = 0; i < 3000; i++)
		keys[i] = 7000 + i;
	esd_buf_init(&b);
	start_peer(&p, &key_a);
	assert_int_equal(connect_to(p.addr, &key_b, &l), 0);
	hello_round_trip(l, 0);
	if (!esd_link_can_tag_in_place(l))
		print_message("this CPU has no VPCLMULQDQ: pieces are sealed as copies here\n");
	for (int round = 0; round < 3; round++) {
		esd_buf_reset(&b);
		assert_int_equal(esd_enc_pull(&b, 1, 4, 0, keys, 3000), 0);
		size_t first = b.len;
		assert_int_equal(esd_enc_pull(&b, 1, 5, 0, keys + 7, 1 + round), 0);
		struct iovec v[5] = {
		    {b.data, ESD_FRAME_HDR_SIZE + 3},
		    {b.data + ESD_FRAME_HDR_SIZE + 3, 61},
		    {b.data + ESD_FRAME_HDR_SIZE + 64, first - ESD_FRAME_HDR_SIZE - 64 - 5},
		    {b.data + first - 5, 5},
		    {b.data + first, b.len - first},
		};
		assert_int_equal(esd_link_sendv(l, v, 5), 0);
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 2 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.count, 3000);
		assert_int_equal(peer_expect(l, &m, ESD_OP_PULL_RESP, 2 * ESD_NS_PER_S), 0);
		assert_int_equal(m.u.rows.count, 1 + round);
		hello_round_trip(l, (uint32_t)round);
	}
	esd_link_close(l);
	peer_stop(&p);
	esd_buf_free(&b);
}

/* Everything a raw client reads from addr after sending bytes, until the
 * close (at most 3 s). */
static size_t raw_exchange(const char *addr, const void *out, size_t len, uint8_t *in,
			   size_t cap)
{
	char host[64];
	unsigned port;
	assert_int_equal(sscanf(addr, "%63[^:]:%u", host, &port), 2);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, out, len, MSG_NOSIGNAL), (ssize_t)len);
	size_t got = 0;
	int64_t end = esd_now_ns() + 3 * ESD_NS_PER_S;
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int64_t left = end - esd_now_ns();
		if (left <= 0 || poll(&pfd, 1, (int)(left / ESD_NS_PER_MS) + 1) <= 0)
			break;
		ssize_t r = recv(fd, in + got, cap - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	return got;
}

static void refused_without_the_key(void **state)
{
	(void)state;
	struct peer p;
	struct esd_link *l;
	start_peer(&p, &key_a);

	/* no key: a plain HELLO gets one ERROR that names no secret, and the close */
	struct esd_buf b;
	esd_buf_init(&b);
	struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 0, .job_token = 1};
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	uint8_t in[4096];
	size_t got = raw_exchange(p.addr, b.data, b.len, in, sizeof(in));
	struct esd_msg m;
	char err[160];
	assert_true(got >= ESD_FRAME_HDR_SIZE);
	uint32_t flen;
	memcpy(&flen, in + 8, 4);
	assert_int_equal(got, ESD_FRAME_HDR_SIZE + flen); /* one frame, then nothing */
	assert_int_equal(esd_proto_decode(in, got, NULL, &m, err, sizeof(err)), 0);
	assert_int_equal(m.hdr.op, ESD_OP_ERROR);
	assert_int_equal(m.u.error.code, -EACCES);
	printf("# a client without the key reads: \"%.*s\"\n", (int)m.u.error.len, m.u.error.text);
	assert_true(m.u.error.len == strlen("authentication failed") &&
		    !memcmp(m.u.error.text, "authentication failed", m.u.error.len));

	/* the keyless link API: connects (nothing to prove), then is refused */
	assert_int_equal(connect_to(p.addr, NULL, &l), 0);
	esd_buf_reset(&b);
	assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
	assert_int_equal(peer_send_buf(l, &b), 0);
	assert_int_equal(peer_expect(l, &m, ESD_OP_ERROR, 2 * ESD_NS_PER_S), 0);
	esd_link_close(l);

	/* another key: the client sees the server's proof fail, sends nothing */
	struct esd_key other;
	memcpy(&other, &key_a, sizeof(other));
	other.b[0] ^= 1;
	assert_int_equal(connect_to(p.addr, &other, &l), -EACCES);

	/* a keyed client and a keyless peer: refused, both ways named */
	struct peer plain;
	start_peer(&plain, NULL);
	assert_int_equal(connect_to(plain.addr, &key_a, &l), -EACCES);

	/* and the keyed peer still serves its job */
	assert_int_equal(connect_to(p.addr, &key_a, &l), 0);
	hello_round_trip(l, 3);
	esd_link_close(l);
	peer_stop(&plain);
	peer_stop(&p);
	esd_buf_free(&b);
}

/* ---- an attacker on the path --------------------------------------------- */

enum attack { ALTER, REPLAY, REORDER, INJECT };

struct relay {
	int lfd, port;
	const char *upstream;
	enum attack what;
	int target; /* index of the client's frame to attack */
	pthread_t th;
};

static int tcp_to(const char *addr)
{
	char host[64];
	unsigned port;
	sscanf(addr, "%63[^:]:%u", host, &port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, host, &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

static void put(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

/* Client-to-server frames pass one by one, the target one attacked. */
static void forward_frames(struct relay *r, int s, uint8_t *buf, size_t *have,
			   int *index, uint8_t *prev, size_t *prev_len, uint8_t *held,
			   size_t *held_len)
{
	for (;;) {
		if (*have < ESD_FRAME_HDR_SIZE)
			return;
		uint32_t blen;
		memcpy(&blen, buf + 8, 4);
		size_t fl = ESD_FRAME_HDR_SIZE + blen;
		if (*have < fl)
			return;
		int i = (*index)++;
		if (i == r->target && r->what == ALTER)
			buf[fl - 20] ^= 0x40; /* a byte of the body, before the tag */
		if (i == r->target && r->what == REORDER) {
			memcpy(held, buf, fl);
			*held_len = fl;
		} else {
			put(s, buf, fl);
			if (*held_len) { /* the held frame after its successor */
				put(s, held, *held_len);
				*held_len = 0;
			}
		}
		if (i == r->target && r->what == REPLAY)
			put(s, prev, *prev_len); /* the previous frame once more */
		if (i == r->target && r->what == INJECT) {
			/* a frame of the attacker's own: a tag it had to guess */
			uint8_t forged[ESD_FRAME_HDR_SIZE + 16 + 16];
			memcpy(forged, prev, ESD_FRAME_HDR_SIZE);
			uint32_t l32 = 32;
			memcpy(forged + 8, &l32, 4);
			memset(forged + ESD_FRAME_HDR_SIZE, 0x5a, 32);
			put(s, forged, sizeof(forged));
		}
		memcpy(prev, buf, fl);
		*prev_len = fl;
		memmove(buf, buf + fl, *have - fl);
		*have -= fl;
	}
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	int c = accept(r->lfd, NULL, NULL);
	int s = tcp_to(r->upstream);
	static uint8_t buf[1 << 20], prev[1 << 20], held[1 << 20];
	size_t have = 0, prev_len = 0, held_len = 0;
	int index = 0;
	for (;;) {
		struct pollfd p[2] = {{.fd = c, .events = POLLIN}, {.fd = s, .events = POLLIN}};
		if (poll(p, 2, 5000) <= 0)
			break;
		uint8_t tmp[65536];
		if (p[1].revents) {
			ssize_t n = recv(s, tmp, sizeof(tmp), 0);
			if (n <= 0)
				break;
			put(c, tmp, (size_t)n);
		}
		if (p[0].revents) {
			ssize_t n = recv(c, buf + have, sizeof(buf) - have, 0);
			if (n <= 0)
				break;
			have += (size_t)n;
			forward_frames(r, s, buf, &have, &index, prev, &prev_len, held, &held_len);
		}
	}
	close(c);
	close(s);
	return NULL;
}

static void relay_start(struct relay *r, const char *upstream, enum attack what, int target)
{
	r->upstream = upstream;
	r->what = what;
	r->target = target;
	r->lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(r->lfd, 1), 0);
	socklen_t sl = sizeof(sa);
	getsockname(r->lfd, (struct sockaddr *)&sa, &sl);
	r->port = ntohs(sa.sin_port);
	assert_int_equal(pthread_create(&r->th, NULL, relay_main, r), 0);
}

/* Frames 0 and 1 are the handshake (hello, proof); 2 is the first HELLO,
 * 3 the first PULL, ... The attacked link must end in an ERROR from the
 * peer naming the authentication failure, never in a wrong answer. */
static void on_path(void **state)
{
	(void)state;
	const char *names[] = {"altered", "replayed", "reordered", "injected"};
	for (int what = ALTER; what <= INJECT; what++) {
		struct peer p;
		struct relay r;
		struct esd_link *l;
		start_peer(&p, &key_a);
		relay_start(&r, p.addr, (enum attack)what, 3);
		char addr[64];
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", r.port);
		assert_int_equal(connect_to(addr, &key_a, &l), 0);
		struct esd_buf b;
		struct esd_msg m;
		esd_buf_init(&b);
		struct esd_hello h = {.proto_version = ESD_PROTO_VERSION, .worker = 1};
		assert_int_equal(esd_enc_hello(&b, &h, 0), 0);
		assert_int_equal(peer_send_buf(l, &b), 0);
		assert_int_equal(peer_expect(l, &m, ESD_OP_HELLO, 2 * ESD_NS_PER_S), 0);
		esd_key_t keys[4] = {1, 2, 3, 4};
		int errors = 0, rows = 0, rc;
		for (int k = 0; k < 3; k++) { /* three PULLs back to back */
			assert_int_equal(esd_enc_pull(&b, 1, (uint64_t)k, 1, keys, 4), 0);
		}
		assert_int_equal(peer_send_buf(l, &b), 0);
		while (!errors && !(rc = esd_link_recv(l, &m, 2 * ESD_NS_PER_S))) {
			if (m.hdr.op == ESD_OP_ERROR) {
				printf("# %s frame: the peer answers \"%.*s\"\n", names[what],
				       (int)m.u.error.len, m.u.error.text);
				assert_non_null(strstr(m.u.error.text, "authentication"));
				errors++;
			} else {
				assert_int_equal(m.hdr.op, ESD_OP_PULL_RESP);
				rows++;
			}
		}
		assert_int_equal(errors, 1);
		assert_true(rows <= 1); /* only the answer to the untouched first PULL */
		esd_link_close(l);
		pthread_join(r.th, NULL);
		close(r.lfd);
		peer_stop(&p);
		esd_buf_free(&b);
	}
}

int main(void)
{
	dir = esd_test_mkdtemp("esd-auth");
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(key_files),
	    cmocka_unit_test(keyed_round_trips),
	    cmocka_unit_test(tagged_in_place),
	    cmocka_unit_test(pieces_tagged_on_the_way),
	    cmocka_unit_test(refused_without_the_key),
	    cmocka_unit_test(on_path),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	esd_test_rmtree(dir);
	free(dir);
	return rc;
}
