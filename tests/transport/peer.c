/* The forked test peer of the transport tests (see peer.h). */
#include "peer.h"

#include <esd/clock.h>
#include <esd/dedup.h>
#include <esd/err.h>
#include <esd/log.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define STORE_SLOTS (1u << 16)

struct slot {
	uint64_t key;
	int used;
	uint64_t clock;
	float v[PEER_DIM];
};

static struct slot *store;
static pthread_mutex_t store_lock = PTHREAD_MUTEX_INITIALIZER;
static struct esd_dedup dedup; /* the PS's rule (esd/dedup.h) */
static pthread_mutex_t dedup_lock = PTHREAD_MUTEX_INITIALIZER;

static struct slot *row(uint64_t key)
{
	uint64_t h = key * 0x9e3779b97f4a7c15ull;
	for (uint32_t i = 0; i < STORE_SLOTS; i++) {
		struct slot *s = &store[(h + i) & (STORE_SLOTS - 1)];
		if (s->used && s->key == key)
			return s;
		if (!s->used) {
			s->used = 1;
			s->key = key;
			for (uint32_t j = 0; j < PEER_DIM; j++)
				s->v[j] = peer_init_value(key, j);
			return s;
		}
	}
	abort(); /* test store full: a bug in the test */
}

static int reply_pull(struct esd_link *l, struct esd_buf *b, const struct esd_msg *m)
{
	struct esd_rows_enc e;
	struct esd_rows r = {.iteration = m->u.pull.iteration,
	                     .sequence = m->u.pull.request,
	                     .worker = m->u.pull.worker,
	                     .kind = ESD_XFER_MISS_PULL,
	                     .dim = PEER_DIM};
	int rc = esd_enc_rows_begin(&e, b, ESD_OP_PULL_RESP, &r);
	pthread_mutex_lock(&store_lock);
	for (uint32_t i = 0; !rc && i < m->u.pull.count; i++) {
		struct slot *s = row(esd_msg_key(m, i));
		rc = esd_enc_row(&e, s->key, s->clock, s->v, NULL);
	}
	pthread_mutex_unlock(&store_lock);
	if (rc)
		return rc;
	esd_enc_rows_end(&e);
	return esd_link_send(l, b->data, b->len);
}

static int apply_push(struct esd_link *l, struct esd_buf *b, const struct esd_msg *m)
{
	const struct esd_rows *r = &m->u.rows;
	int fresh = -EINVAL;
	pthread_mutex_lock(&dedup_lock);
	if (r->worker < ESD_MAX_WORKERS) {
		fresh = esd_dedup_fresh(&dedup, r->worker, r->sequence);
		if (fresh)
			esd_dedup_applied(&dedup, r->worker, r->sequence);
	}
	pthread_mutex_unlock(&dedup_lock);
	if (fresh == 1) {
		pthread_mutex_lock(&store_lock);
		for (uint32_t i = 0; i < r->count; i++) {
			struct esd_row_view v;
			esd_rows_get(r, i, &v);
			struct slot *s = row(v.key);
			for (uint32_t j = 0; j < PEER_DIM && j < r->dim; j++) {
				if (m->hdr.op == ESD_OP_PUSH_GRAD)
					s->v[j] += v.value[j];
				else
					s->v[j] = v.value[j];
			}
			s->clock++;
		}
		pthread_mutex_unlock(&store_lock);
	}
	struct esd_ack a = {.iteration = r->iteration,
	                    .sequence = r->sequence,
	                    .op = m->hdr.op,
	                    .status = fresh < 0    ? fresh
	                              : fresh == 1 ? 0
	                                           : 1};
	int rc = esd_enc_ack(b, &a);
	return rc ? rc : esd_link_send(l, b->data, b->len);
}

static void *serve(void *arg)
{
	struct esd_link *l = arg;
	struct esd_buf b;
	esd_buf_init(&b);
	for (;;) {
		struct esd_msg m;
		int rc = esd_link_recv(l, &m, -1);
		esd_buf_reset(&b);
		if (rc) {
			if (rc != -ECONNRESET && rc != -EPIPE)
				esd_link_send_error(l, rc, esd_link_last_error(l));
			break;
		}
		switch (m.hdr.op) {
		case ESD_OP_HELLO: {
			struct esd_hello h = m.u.hello;
			h.proto_version = ESD_PROTO_VERSION;
			h.dim = PEER_DIM;
			rc = esd_enc_hello(&b, &h, ESD_FLAG_REPLY);
			if (!rc)
				rc = esd_link_send(l, b.data, b.len);
			break;
		}
		case ESD_OP_PULL:
			rc = reply_pull(l, &b, &m);
			break;
		case ESD_OP_PUSH_VALUE:
		case ESD_OP_PUSH_GRAD:
			rc = apply_push(l, &b, &m);
			break;
		case ESD_OP_BARRIER: {
			struct esd_ack a = {.iteration = m.u.barrier.iteration,
			                    .op = ESD_OP_BARRIER};
			rc = esd_enc_ack(&b, &a); /* as esd-ps: sequence 0 for a barrier */
			if (!rc)
				rc = esd_link_send(l, b.data, b.len);
			break;
		}
		case ESD_OP_STATS: {
			struct esd_link_stats st;
			struct esd_stats_entry e[ESD_XFER_NKINDS];
			esd_link_stats(l, &st);
			esd_link_stats_entries(&st, e);
			rc = esd_enc_stats(&b, e, ESD_XFER_NKINDS, ESD_FLAG_REPLY);
			if (!rc)
				rc = esd_link_send(l, b.data, b.len);
			break;
		}
		default:
			rc = esd_link_send_error(l, -EPROTO, "test peer: unexpected op");
			break;
		}
		if (rc)
			break;
	}
	esd_buf_free(&b);
	esd_link_close(l);
	return NULL;
}

static void run_peer(const struct esd_link_opts *o, int fd)
{
	struct esd_listener *ls;
	char addr[256] = "";
	esd_log_init("peer");
	store = calloc(STORE_SLOTS, sizeof(*store));
	if (!store)
		_exit(3);
	esd_dedup_reset(&dedup);
	int rc = esd_listener_open(o, &ls);
	if (!rc)
		esd_listener_addr(ls, addr, sizeof(addr));
	char msg[300];
	int n = snprintf(msg, sizeof(msg), "%d %s\n", rc, addr);
	if (write(fd, msg, (size_t)n) != n)
		_exit(4);
	close(fd);
	if (rc)
		_exit(2);
	for (;;) {
		struct esd_link *l;
		rc = esd_listener_accept(ls, -1, &l);
		if (rc == -EMFILE)
			break;
		if (rc)
			continue;
		pthread_t t;
		if (pthread_create(&t, NULL, serve, l))
			_exit(5);
		pthread_detach(t);
	}
	/* Every link id handed out: serve until killed. */
	for (;;)
		pause();
}

void peer_af_packet_opts(struct esd_link_opts *o, const char *iface)
{
	esd_link_opts_init(o);
	o->backend = "dpdk";
	o->dpdk_vdev = "af_packet";
	o->dpdk_mtu = 1400;
	o->addr = iface;
}

int peer_start(struct peer *p, const struct esd_link_opts *o)
{
	int fds[2];
	if (pipe(fds))
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(fds[0]);
		/* a test killed before it stops its peer takes the peer along
		 * (a polling dpdk peer left behind would slow every later test) */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		run_peer(o, fds[1]);
		_exit(0);
	}
	close(fds[1]);
	char buf[300] = "";
	ssize_t got = 0, r;
	struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
	/* Never wait on a peer that hangs while starting. */
	while (poll(&pfd, 1, 20000) == 1 &&
	       (r = read(fds[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += r;
	close(fds[0]);
	int rc = -EIO;
	p->pid = pid;
	if (got > 0 && sscanf(buf, "%d %255s", &rc, p->addr) >= 1 && rc == 0)
		return 0;
	peer_kill(p);
	return rc == -ENODEV ? -ENODEV : (rc ? rc : -EIO);
}

void peer_kill(struct peer *p)
{
	if (p->pid <= 0)
		return;
	kill(p->pid, SIGKILL);
	waitpid(p->pid, NULL, 0);
	p->pid = 0;
}

void peer_stop(struct peer *p)
{
	if (p->pid <= 0)
		return;
	kill(p->pid, SIGTERM);
	for (int i = 0; i < 200; i++) {
		if (waitpid(p->pid, NULL, WNOHANG) == p->pid) {
			p->pid = 0;
			return;
		}
		usleep(10000);
	}
	peer_kill(p);
}

int peer_send_buf(struct esd_link *l, struct esd_buf *b)
{
	int rc = esd_link_send(l, b->data, b->len);
	esd_buf_reset(b);
	return rc;
}

int peer_expect(struct esd_link *l, struct esd_msg *m, unsigned op, int64_t timeout_ns)
{
	int rc = esd_link_recv(l, m, timeout_ns);
	if (rc)
		return rc;
	if (m->hdr.op != op) {
		fprintf(stderr, "expected %s, got %s\n", esd_op_name(op), esd_op_name(m->hdr.op));
		return -EPROTO;
	}
	return 0;
}

long peer_idle_sleeps(struct esd_link *l, int64_t ns)
{
	struct rusage r0, r1;
	struct esd_msg m;
	getrusage(RUSAGE_THREAD, &r0);
	int rc = esd_link_recv(l, &m, ns);
	getrusage(RUSAGE_THREAD, &r1);
	if (rc != -ETIMEDOUT)
		return -EPROTO;
	long sleeps = r1.ru_nvcsw - r0.ru_nvcsw;
	double cpu_ms = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
	                         r0.ru_stime.tv_sec) * 1e3 +
	                (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
	                         r0.ru_stime.tv_usec) / 1e3;
	printf("# idle for %.0f ms: %ld sleeps, %.1f ms of CPU\n", (double)ns / 1e6, sleeps, cpu_ms);
	return sleeps;
}
