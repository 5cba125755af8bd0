/*
 * libesd: the trainer's side of the attach protocol (esd/libesd.h). The
 * cache region is mapped with gradient slots writable and everything else
 * read-only, so a trainer bug cannot corrupt rows or metadata. A small
 * thread sends the heartbeats, so that a trainer busy in a long step (a
 * PyTorch one holding the GIL) is not taken for a dead one; a fatal
 * signal tells the daemon which before the process dies.
 */
#include <esd/libesd.h>
#include <esd/cache.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include "attach.h"
#include "xchg.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

struct esd_trainer {
	int fd;
	char sock[600];           /* DIR/esdd.sock, for messages */
	uint32_t heartbeat_ms;    /* 0: the daemon speaks no heartbeats */
	uint32_t peer_timeout_ms;
	int64_t last_rx_ns;       /* the daemon's last message */
	_Atomic int64_t last_tx_ns; /* ours */
	pthread_t hb_thread;
	int hb_stop_fd;           /* eventfd: the heartbeat thread ends; -1: none runs */
	struct esd_cache *cache;
	struct esd_xchg_hdr *xchg;
	size_t xchg_len;
	float *grads; /* trainer index > 0: its own gradient slots, else NULL */
	size_t grads_len;
	struct esd_trainer_info info;
	uint64_t cur_iter;
	uint32_t *ident; /* a version-1 area: bag_off[j] = j */
	uint32_t *dims;  /* [tables] each table's dim */
};

static bool no_daemon_yet(int rc)
{
	return rc == -ENOENT || rc == -ECONNREFUSED;
}

static int attach_on(const char *dir, int fd, struct esd_trainer **out);

int esd_trainer_attach_wait(const char *dir, int timeout_ms, struct esd_trainer **out)
{
	const int64_t t0 = esd_now_ns(), end = t0 + (int64_t)timeout_ms * ESD_NS_PER_MS;
	int fd = -1, rc;
	bool told = false;
	/* connect quietly until the daemon listens; the connection made is
	 * the one the trainer attaches on (a probe closed without a HELLO
	 * would be logged by the daemon as a stranger) */
	while (no_daemon_yet(rc = esd_attach_connect(dir, &fd)) && timeout_ms > 0 &&
	       esd_now_ns() < end) {
		if (!told)
			ESD_INFO("libesd", "no daemon listens on %s/%s yet: waiting up to %.1f s",
				 dir, ESD_ATTACH_SOCK, timeout_ms / 1e3);
		told = true;
		esd_sleep_ns(50 * ESD_NS_PER_MS);
	}
	if (rc) {
		ESD_ERR("libesd", "cannot connect to %s/%s after %.1f s (waited up to %.1f s): %s "
			"(is esdd running with --dir %s?)", dir, ESD_ATTACH_SOCK,
			esd_ns_to_s(esd_now_ns() - t0), timeout_ms > 0 ? timeout_ms / 1e3 : 0.0,
			esd_strerror(rc), dir);
		return rc;
	}
	return attach_on(dir, fd, out);
}

/* ---- heartbeats --------------------------------------------------------- */

/* Send m on t's socket, noting when (the heartbeat thread sends only
 * after a quiet interval). */
static int send_msg(struct esd_trainer *t, const struct esd_attach_msg *m)
{
	int rc = esd_attach_send(t->fd, m, NULL, 0);
	if (!rc)
		atomic_store_explicit(&t->last_tx_ns, esd_now_ns(), memory_order_relaxed);
	return rc;
}

/* The heartbeat thread: a HEARTBEAT whenever the trainer sent nothing for
 * heartbeat_ms (not while the daemon has not read our last message: it
 * hears from us then anyway). Nothing else runs on it, so a trainer busy
 * in a step still answers. */
static void *heartbeat_main(void *arg)
{
	struct esd_trainer *t = arg;
	const int64_t every = (int64_t)t->heartbeat_ms * ESD_NS_PER_MS;
	struct esd_attach_msg hb = esd_attach_msg_make(ESD_AT_HEARTBEAT);
	struct pollfd p = {.fd = t->hb_stop_fd, .events = POLLIN};
	int64_t due = 0;
	for (;;) {
		int64_t now = esd_now_ns();
		due = atomic_load_explicit(&t->last_tx_ns, memory_order_relaxed) + every;
		if (now >= due) {
			if (esd_attach_send_nowait(t->fd, &hb) == 0) {
				atomic_store_explicit(&t->last_tx_ns, now, memory_order_relaxed);
				due = now + every;
			} else {
				due = now + every / 4; /* unread or full: look again soon */
			}
		}
		int wait_ms = (int)((due - now + ESD_NS_PER_MS - 1) / ESD_NS_PER_MS);
		if (poll(&p, 1, wait_ms > 0 ? wait_ms : 1) != 0 && (p.revents & POLLIN))
			return NULL;
	}
}

static int heartbeat_start(struct esd_trainer *t)
{
	t->hb_stop_fd = eventfd(0, EFD_CLOEXEC);
	if (t->hb_stop_fd < 0)
		return esd_neg_errno();
	atomic_store(&t->last_tx_ns, esd_now_ns());
	int rc = pthread_create(&t->hb_thread, NULL, heartbeat_main, t);
	if (rc) {
		close(t->hb_stop_fd);
		t->hb_stop_fd = -1;
		return -rc;
	}
	pthread_setname_np(t->hb_thread, "esd-heartbeat");
	return 0;
}

static void heartbeat_stop(struct esd_trainer *t)
{
	if (t->hb_stop_fd < 0)
		return;
	uint64_t one = 1;
	if (write(t->hb_stop_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		pthread_join(t->hb_thread, NULL);
	close(t->hb_stop_fd);
	t->hb_stop_fd = -1;
}

/* ---- fatal signals ------------------------------------------------------ */

/* A fatal signal sends the daemon a FAILED naming it (formatted at attach:
 * the handler only sends), then takes its course under the action it had
 * before. The last trainer attached in the process is the one told. */
static const int fatal_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define NFATAL (sizeof(fatal_sigs) / sizeof(fatal_sigs[0]))
static struct sigaction fatal_prev[NFATAL];
static struct esd_attach_msg fatal_msg[NFATAL];
static size_t fatal_len[NFATAL];
static volatile sig_atomic_t fatal_fd = -1;
static pthread_once_t fatal_once = PTHREAD_ONCE_INIT;

static void on_fatal(int sig)
{
	for (size_t i = 0; i < NFATAL; i++) {
		if (fatal_sigs[i] != sig)
			continue;
		int fd = fatal_fd;
		if (fd >= 0)
			(void)!send(fd, &fatal_msg[i], fatal_len[i], MSG_NOSIGNAL | MSG_DONTWAIT);
		sigaction(sig, &fatal_prev[i], NULL);
		raise(sig);
		return;
	}
}

static void fatal_install(void)
{
	struct sigaction sa = {.sa_handler = on_fatal, .sa_flags = SA_ONSTACK};
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < NFATAL; i++) {
		struct esd_attach_msg *m = &fatal_msg[i];
		*m = esd_attach_msg_make(ESD_AT_FAILED);
		snprintf(m->detail, sizeof(m->detail), "killed by signal SIG%s (%s)",
			 sigabbrev_np(fatal_sigs[i]) ? sigabbrev_np(fatal_sigs[i]) : "?",
			 strsignal(fatal_sigs[i]));
		fatal_len[i] = esd_attach_msg_size(m->version) + strlen(m->detail) + 1;
		sigaction(fatal_sigs[i], &sa, &fatal_prev[i]);
	}
}

/* A trainer after the first writes its gradients into its own slots (the
 * daemon adds them to the region's in trainer order). */
static int map_grads(struct esd_trainer *t, int fd)
{
	struct stat st;
	struct esd_cache_info ci;
	if (fstat(fd, &st) < 0)
		return esd_neg_errno();
	esd_cache_get_info(t->cache, &ci);
	if ((size_t)st.st_size < (size_t)ci.rows * ci.dim * sizeof(float)) {
		ESD_ERR("libesd", "gradient area of %lld bytes is below %u rows of %u floats",
			(long long)st.st_size, ci.rows, ci.dim);
		return -EPROTO;
	}
	t->grads_len = (size_t)st.st_size;
	void *m = mmap(NULL, t->grads_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return esd_neg_errno();
	t->grads = m;
	return 0;
}

/* The trainer's view of what it attached to: the WELCOME's identity, the
 * region's and the exchange area's shapes, the rows' layout. */
static void fill_info(struct esd_trainer *t, const struct esd_attach_msg *w)
{
	struct esd_cache_info ci;
	esd_cache_get_info(t->cache, &ci);
	struct esd_trainer_info *in = &t->info;
	in->rank = w->rank;
	in->workers = w->workers;
	in->dim = ci.dim;
	in->tables = t->xchg->tables;
	in->dense = t->xchg->dense;
	in->dense_params = t->xchg->dense_params;
	in->max_batch = t->xchg->max_batch;
	in->max_keys = t->xchg->max_keys;
	in->bags = t->xchg->version >= ESD_XCHG_VERSION_BAGS;
	in->weighted = t->xchg->version == ESD_XCHG_VERSION_WEIGHTS;
	in->capacity = ci.rows;
	in->values_base = esd_cache_vec(t->cache, 0);
	in->index = w->index;
	in->trainers = w->trainers;
	in->grads_base = t->grads ? (void *)t->grads : esd_cache_grad(t->cache, 0);
	in->value_stride = ci.rows > 1 ? (size_t)((char *)esd_cache_vec(t->cache, 1) -
						  (char *)esd_cache_vec(t->cache, 0))
				       : ci.dim * sizeof(float);
	in->grad_stride = t->grads || ci.rows <= 1
				  ? ci.dim * sizeof(float)
				  : (size_t)((char *)esd_cache_grad(t->cache, 1) -
					     (char *)esd_cache_grad(t->cache, 0));
}

/* Each table's dim: the area's dims (each 1..the region's dim) or the
 * region's dim for all. 0, -EPROTO (logged) or -ENOMEM. */
static int read_dims(struct esd_trainer *t)
{
	const uint32_t T = t->xchg->tables, dim = t->info.dim;
	const uint32_t *src = t->xchg->off_dims ? esd_xchg_at(t->xchg, t->xchg->off_dims) : NULL;
	t->dims = malloc(((size_t)T + 1) * sizeof(*t->dims));
	if (!t->dims)
		return -ENOMEM;
	for (uint32_t i = 0; i < T; i++) {
		t->dims[i] = src ? src[i] : dim;
		if (t->dims[i] < 1 || t->dims[i] > dim) {
			ESD_ERR("libesd", "exchange area: table %u has dim %u, outside 1..%u", i,
				t->dims[i], dim);
			return -EPROTO;
		}
	}
	return 0;
}

const uint32_t *esd_trainer_table_dims(const struct esd_trainer *t)
{
	return t->dims;
}

/* The offsets of a version-1 area, where every bag has one key. */
static int make_ident(struct esd_trainer *t)
{
	size_t n = (size_t)t->xchg->max_batch * t->xchg->tables + 1;
	t->ident = malloc(n * sizeof(*t->ident));
	if (!t->ident)
		return -ENOMEM;
	for (size_t j = 0; j < n; j++)
		t->ident[j] = (uint32_t)j;
	return 0;
}

/* The bag offsets of a version-2 micro-batch of m samples and nkeys keys
 * go forward from 0 to nkeys (a corrupt area is refused, not indexed). */
static bool bags_ok(const uint32_t *bo, size_t nbags, uint32_t nkeys)
{
	if (bo[0] != 0 || bo[nbags] != nkeys)
		return false;
	for (size_t j = 0; j < nbags; j++)
		if (bo[j + 1] < bo[j])
			return false;
	return true;
}

int esd_trainer_attach(const char *dir, struct esd_trainer **out)
{
	int fd, rc = esd_attach_connect(dir, &fd);
	if (rc) {
		ESD_ERR("libesd", "cannot connect to %s/%s: %s (is esdd running with --dir %s?)",
			dir, ESD_ATTACH_SOCK, esd_strerror(rc), dir);
		return rc;
	}
	return attach_on(dir, fd, out);
}

/* The WELCOME's part after the fds: heartbeats (a version-4 daemon) and
 * the fatal signals' FAILED. */
static int start_watch(struct esd_trainer *t, const struct esd_attach_msg *w)
{
	t->last_rx_ns = esd_now_ns();
	if (w->version >= 4 && w->heartbeat_ms) {
		t->heartbeat_ms = w->heartbeat_ms;
		t->peer_timeout_ms = w->peer_timeout_ms;
		int rc = heartbeat_start(t);
		if (rc)
			return rc;
	}
	pthread_once(&fatal_once, fatal_install);
	fatal_fd = t->fd;
	return 0;
}

/* Attach on fd, connected to dir's daemon: HELLO, then the WELCOME's fds
 * mapped. Takes fd. */
static int attach_on(const char *dir, int fd, struct esd_trainer **out)
{
	struct esd_trainer *t = calloc(1, sizeof(*t));
	struct esd_attach_msg m;
	int fds[3], nfds = 3, rc;
	const int welcome_ms = 30000;

	if (!t) {
		close(fd);
		return -ENOMEM;
	}
	t->fd = fd;
	t->hb_stop_fd = -1;
	snprintf(t->sock, sizeof(t->sock), "%s/%s", dir, ESD_ATTACH_SOCK);
	m = esd_attach_msg_make(ESD_AT_HELLO);
	m.pid = (uint32_t)getpid();
	rc = esd_attach_send(t->fd, &m, NULL, 0);
	if (rc)
		goto err;
	rc = esd_attach_recv(t->fd, &m, fds, &nfds, welcome_ms);
	if (rc) {
		ESD_ERR("libesd", "no answer to our HELLO on %s within %d s: %s", t->sock,
			welcome_ms / 1000, esd_strerror(rc));
		goto err;
	}
	if (m.op == ESD_AT_REFUSE) {
		ESD_ERR("libesd", "the daemon of %s refused us: %s", dir, m.text);
		rc = -EPERM;
		goto err_fds;
	}
	if (m.op != ESD_AT_WELCOME || nfds != (m.index > 0 ? 3 : 2)) {
		ESD_ERR("libesd", "unexpected answer to HELLO (op %u, %d fds)", m.op, nfds);
		rc = -EPROTO;
		goto err_fds;
	}
	rc = esd_cache_attach_fd(fds[0], 0, &t->cache);
	if (rc)
		goto err_fds;
	struct stat st;
	if (fstat(fds[1], &st) < 0) {
		rc = esd_neg_errno();
		goto err_fds;
	}
	t->xchg_len = (size_t)st.st_size;
	t->xchg = mmap(NULL, t->xchg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	if (t->xchg == MAP_FAILED) {
		t->xchg = NULL;
		rc = esd_neg_errno();
		goto err_fds;
	}
	rc = esd_xchg_check(t->xchg, t->xchg_len);
	if (rc) {
		rc = -EPROTO;
		goto err_fds;
	}
	if (nfds == 3 && (rc = map_grads(t, fds[2])))
		goto err_fds;
	if (t->xchg->version == ESD_XCHG_VERSION && (rc = make_ident(t)))
		goto err_fds;
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (m.index == 0) /* the region's gradient slots are trainer 0's */
		esd_cache_trainer_hello(t->cache);

	if (m.flags & ESD_AT_INSECURE)
		ESD_WARN("libesd", "INSECURE job (job.insecure = yes): it has no job key, so "
			 "anyone who reaches its shards' ports can join it, read and overwrite "
			 "rows (docs/protocol.md, Threat model)");
	fill_info(t, &m);
	rc = read_dims(t);
	if (!rc)
		rc = start_watch(t, &m);
	if (rc)
		goto err;
	*out = t;
	return 0;
err_fds:
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
err:
	esd_trainer_detach(t);
	return rc;
}

void esd_trainer_get_info(const struct esd_trainer *t, struct esd_trainer_info *info)
{
	*info = t->info;
}

/* Milliseconds from now to deadline (-1: none), rounded up. */
static int ms_until(int64_t deadline, int64_t now)
{
	if (deadline == INT64_MAX)
		return -1;
	return deadline <= now ? 0 : (int)((deadline - now + ESD_NS_PER_MS - 1) / ESD_NS_PER_MS);
}

/* The daemon's next message other than a heartbeat, waiting at most
 * timeout_ms (-1: no bound of the caller's). With heartbeats a daemon
 * silent for peer_timeout_ms is given up on: -EHOSTDOWN, logged. */
static int recv_work(struct esd_trainer *t, struct esd_attach_msg *m, int timeout_ms)
{
	const int64_t end = timeout_ms < 0 ? INT64_MAX
					   : esd_now_ns() + (int64_t)timeout_ms * ESD_NS_PER_MS;
	const int64_t silence = (int64_t)t->peer_timeout_ms * ESD_NS_PER_MS;
	for (;;) {
		int64_t now = esd_now_ns(), until = end;
		if (t->heartbeat_ms && t->last_rx_ns + silence < until)
			until = t->last_rx_ns + silence;
		int rc = esd_attach_recv(t->fd, m, NULL, NULL, ms_until(until, now));
		now = esd_now_ns();
		if (rc == 0) {
			t->last_rx_ns = now;
			if (m->op == ESD_AT_HEARTBEAT)
				continue;
			return 0;
		}
		if (rc != -ETIMEDOUT)
			return rc;
		if (t->heartbeat_ms && now - t->last_rx_ns >= silence) {
			ESD_ERR("libesd", "the daemon on %s sent nothing, not even a heartbeat, for "
				"%.1f s (job.peer_timeout_ms %u): it is stopped or hung; giving up",
				t->sock, esd_ns_to_s(now - t->last_rx_ns), t->peer_timeout_ms);
			return -EHOSTDOWN;
		}
		if (now >= end)
			return -ETIMEDOUT;
	}
}

int esd_trainer_next(struct esd_trainer *t, int timeout_ms, struct esd_microbatch *mb)
{
	struct esd_attach_msg m;
	int rc = recv_work(t, &m, timeout_ms);
	if (rc)
		return rc;
	if (m.op == ESD_AT_STOP)
		return 1;
	struct esd_xchg_hdr *h = t->xchg;
	const size_t nbags = (size_t)m.m * h->tables;
	if (m.op != ESD_AT_BATCH || m.m > h->max_batch || m.nkeys > h->max_keys)
		return -EPROTO;
	mb->weights = h->off_weights ? esd_xchg_at(h, h->off_weights) : NULL;
	if (h->version >= ESD_XCHG_VERSION_BAGS) {
		mb->bag_off = esd_xchg_at(h, h->off_bag_off);
		if (!bags_ok(mb->bag_off, nbags, m.nkeys)) {
			ESD_ERR("libesd", "iteration %llu: the bag offsets of %u samples do not "
				"run from 0 to %u keys", (unsigned long long)m.iter, m.m, m.nkeys);
			return -EPROTO;
		}
	} else {
		if (m.nkeys != nbags)
			return -EPROTO;
		mb->bag_off = t->ident;
	}
	mb->nkeys = m.nkeys;
	mb->flags = m.flags;
	t->cur_iter = m.iter;
	mb->iter = m.iter;
	mb->m = m.m;
	mb->tables = h->tables;
	mb->global_k = m.global_k;
	mb->slots = esd_xchg_at(h, h->off_slots);
	mb->keys = esd_xchg_at(h, h->off_keys);
	mb->labels = esd_xchg_at(h, h->off_labels);
	mb->dense = esd_xchg_at(h, h->off_dense);
	mb->params = esd_xchg_at(h, h->off_params);
	mb->dgrad = esd_xchg_at(h, h->off_dgrad);
	return 0;
}

const float *esd_trainer_row(const struct esd_trainer *t, uint32_t slot)
{
	return esd_cache_vec(t->cache, slot);
}

float *esd_trainer_grad(const struct esd_trainer *t, uint32_t slot)
{
	if (t->grads)
		return t->grads + (size_t)slot * t->info.dim;
	return esd_cache_grad(t->cache, slot);
}

typedef float f32x8 __attribute__((vector_size(32)));

/* One gradient row into a slot: dst += src / div (div NULL: dst += src),
 * src's elements col_stride floats apart (0: one value for the row).
 * Contiguous and broadcast rows go 8 lanes at a time (vector adds);
 * every element gets the same roundings (one division, one add) whichever
 * branch runs. */
static void add_row(float *restrict dst, const float *restrict src, ptrdiff_t col_stride,
                    uint32_t dim, const float *div)
{
	uint32_t d = 0;
	if (col_stride == 0) {
		float v = div ? src[0] / *div : src[0];
		for (; d + 8 <= dim; d += 8) {
			f32x8 a;
			memcpy(&a, dst + d, sizeof a);
			a += v;
			memcpy(dst + d, &a, sizeof a);
		}
		for (; d < dim; d++)
			dst[d] += v;
	} else if (col_stride == 1) {
		float q = div ? *div : 1.0f;
		for (; d + 8 <= dim; d += 8) {
			f32x8 a, b;
			memcpy(&a, dst + d, sizeof a);
			memcpy(&b, src + d, sizeof b);
			a += div ? b / q : b;
			memcpy(dst + d, &a, sizeof a);
		}
		for (; d < dim; d++)
			dst[d] += div ? src[d] / q : src[d];
	} else {
		for (; d < dim; d++)
			dst[d] += div ? src[d * col_stride] / *div : src[d * col_stride];
	}
}

/* add_row for a weighted key: dst += w * (src / div) (div NULL: w * src),
 * element by element, the same roundings as the sum's derivative. */
static void add_row_w(float *restrict dst, const float *restrict src, ptrdiff_t col_stride,
                      uint32_t dim, const float *div, float w)
{
	for (uint32_t d = 0; d < dim; d++) {
		float v = src[(ptrdiff_t)d * col_stride];
		dst[d] += w * (div ? v / *div : v);
	}
}

static int add_grads_check(const struct esd_trainer *t, const int64_t *slots, size_t nkeys,
                           const int64_t *offsets, size_t nbags)
{
	for (size_t k = 0; k < nkeys; k++)
		if (slots[k] < 0 || (uint64_t)slots[k] >= t->info.capacity)
			return -ERANGE;
	for (size_t b = 0; offsets && b < nbags; b++) {
		int64_t end = b + 1 < nbags ? offsets[b + 1] : (int64_t)nkeys;
		if (offsets[b] < 0 || offsets[b] > end || end > (int64_t)nkeys)
			return -EINVAL;
	}
	if (offsets && nbags && offsets[0] != 0)
		return -EINVAL;
	return 0;
}

int esd_trainer_add_grads(const struct esd_trainer *t, const int64_t *slots, size_t nkeys,
                          const int64_t *offsets, size_t nbags, const float *g,
                          ptrdiff_t row_stride, ptrdiff_t col_stride, const float *div)
{
	return esd_trainer_add_grads_w(t, slots, nkeys, offsets, nbags, g, row_stride, col_stride,
	                               div, NULL);
}

int esd_trainer_add_grads_w(const struct esd_trainer *t, const int64_t *slots, size_t nkeys,
                            const int64_t *offsets, size_t nbags, const float *g,
                            ptrdiff_t row_stride, ptrdiff_t col_stride, const float *div,
                            const float *weights)
{
	if (!t || (nkeys && (!slots || !g)) || (!offsets && nbags != nkeys))
		return -EINVAL;
	int rc = add_grads_check(t, slots, nkeys, offsets, nbags);
	if (rc < 0)
		return rc;
	uint32_t dim = t->info.dim;
	for (size_t b = 0; b < nbags; b++) {
		size_t k0 = offsets ? (size_t)offsets[b] : b;
		size_t k1 = !offsets ? b + 1 : b + 1 < nbags ? (size_t)offsets[b + 1] : nkeys;
		const float *src = g + (ptrdiff_t)b * row_stride;
		for (size_t k = k0; k < k1; k++)
			if (weights)
				add_row_w(esd_trainer_grad(t, (uint32_t)slots[k]), src, col_stride,
				          dim, div ? div + b : NULL, weights[k]);
			else
				add_row(esd_trainer_grad(t, (uint32_t)slots[k]), src, col_stride,
				        dim, div ? div + b : NULL);
	}
	return 0;
}

int esd_trainer_commit(struct esd_trainer *t, const struct esd_microbatch *mb, double loss)
{
	if (!mb || mb->iter != t->cur_iter)
		return -EINVAL;
	esd_cache_grad_commit(t->cache, mb->iter);
	atomic_store_explicit(&t->xchg->commit_iter, mb->iter, memory_order_release);
	t->xchg->loss = loss;
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_COMMIT);
	m.iter = mb->iter;
	m.loss = loss;
	return send_msg(t, &m);
}

int esd_trainer_request_stop(struct esd_trainer *t)
{
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_STOP_REQ);
	return esd_attach_send(t->fd, &m, NULL, 0);
}

int esd_trainer_fail(struct esd_trainer *t, const char *text)
{
	if (!t || t->fd < 0)
		return -EINVAL;
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_FAILED);
	snprintf(m.detail, sizeof(m.detail), "%s", text && *text ? text : "(no reason given)");
	return send_msg(t, &m);
}

void esd_trainer_detach(struct esd_trainer *t)
{
	if (!t)
		return;
	heartbeat_stop(t);
	if (fatal_fd == t->fd)
		fatal_fd = -1;
	if (t->xchg)
		munmap(t->xchg, t->xchg_len);
	if (t->grads)
		munmap(t->grads, t->grads_len);
	esd_cache_close(t->cache);
	if (t->fd >= 0)
		close(t->fd);
	free(t->ident);
	free(t->dims);
	free(t);
}
