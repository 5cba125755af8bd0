/*
 * The daemon's side of the attach protocol (docs/runtime.md): the node's
 * workers.trainers training processes, each checked by uid and handed the
 * cache region, its own exchange area and (all but the first) its own
 * gradient slots as fds. Each iteration every trainer gets an equal
 * contiguous share of the node's micro-batch; trainer 0 writes its row
 * gradients into the region's gradient slots, the others into theirs, and
 * once every share is committed the daemon adds them in trainer order, so
 * the sum does not depend on which trainer finished first. A trainer's
 * death is seen at once on its socket, its silence (a stopped process)
 * within job.peer_timeout_ms: without job.restart_trainers either fails
 * the job at once, as a trainer's FAILED always does; with it the share
 * is replayed to the next trainer that attaches within job.restart_wait.
 * A thread of its own sends the trainers heartbeats, so that a daemon
 * busy in a barrier is not taken for a dead one.
 */
#include "node.h"
#include "attach.h"
#include "rows.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <esd/transport.h>

#include <dirent.h>
#include <poll.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* A shared memory file of len bytes, mapped read-write. */
static int make_area(const char *name, size_t len, int *fd, void **map)
{
	*fd = memfd_create(name, MFD_CLOEXEC);
	if (*fd < 0)
		return esd_neg_errno();
	if (ftruncate(*fd, (off_t)len) < 0)
		return esd_neg_errno();
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (m == MAP_FAILED)
		return esd_neg_errno();
	*map = m;
	return 0;
}

/* Trainer slot i's exchange area, and its gradient slots for i > 0. */
static int make_slot(struct node *nd, uint32_t i)
{
	struct node_trainer_slot *ts = &nd->tr.t[i];
	struct esd_xchg_hdr h;
	uint32_t mb = node_max_batch(nd);
	uint64_t mk = (uint64_t)mb * nd->width;
	esd_xchg_layout_w(&h, mb, nd->tables,
			  !nd->bags ? 0 : mk > UINT32_MAX ? UINT32_MAX : (uint32_t)mk, nd->dense,
			  nd->dense_params, nd->weighted);
	if (nd->job.ntable_dims)
		esd_xchg_add_dims(&h);
	void *m;
	int rc = make_area("esd-xchg", h.total_size, &ts->xchg_fd, &m);
	if (rc)
		return rc;
	ts->xchg = m;
	ts->xchg_len = h.total_size;
	memcpy(ts->xchg, &h, sizeof(h));
	if (h.off_dims)
		memcpy(esd_xchg_at(ts->xchg, h.off_dims), nd->job.table_dims,
		       (size_t)nd->tables * sizeof(uint32_t));
	if (i == 0)
		return 0;
	struct esd_cache_info ci;
	esd_cache_get_info(nd->cache, &ci);
	ts->grads_len = (size_t)ci.rows * ci.dim * sizeof(float);
	rc = make_area("esd-grads", ts->grads_len, &ts->grad_fd, &m);
	if (!rc)
		ts->grads = m;
	return rc;
}

/* Send m to trainer slot ts, noting when (the heartbeat thread sends only
 * after a quiet interval). */
static int send_to(struct node_trainer_slot *ts, int fd, const struct esd_attach_msg *m,
		   const int *fds, int nfds)
{
	int rc = esd_attach_send(fd, m, fds, nfds);
	if (!rc)
		atomic_store_explicit(&ts->last_tx_ns, esd_now_ns(), memory_order_relaxed);
	return rc;
}

/* One round of the heartbeat thread: a HEARTBEAT to every version-4
 * trainer we sent nothing for job.heartbeat_ms (not while it has not read
 * our last message: it hears from us then anyway). Under qmu, which
 * guards the slots' fds. */
static void heartbeat_round(struct node *nd)
{
	const int64_t every = (int64_t)nd->job.heartbeat_ms * ESD_NS_PER_MS;
	pthread_mutex_lock(&nd->qmu);
	for (uint32_t i = 0; i < nd->tr.count; i++) {
		struct node_trainer_slot *ts = &nd->tr.t[i];
		int64_t now = esd_now_ns();
		if (ts->fd < 0 || ts->version < 4 ||
		    now - atomic_load_explicit(&ts->last_tx_ns, memory_order_relaxed) < every)
			continue;
		struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_HEARTBEAT);
		m.version = ts->version;
		if (esd_attach_send_nowait(ts->fd, &m) == 0)
			atomic_store_explicit(&ts->last_tx_ns, now, memory_order_relaxed);
	}
	pthread_mutex_unlock(&nd->qmu);
}

/* The heartbeat thread: nothing else runs on it, so the trainers hear
 * from a daemon that waits at a barrier or pulls rows for long. */
static void *heartbeat_main(void *arg)
{
	struct node *nd = arg;
	int every_ms = (int)nd->job.heartbeat_ms;
	struct pollfd p = {.fd = nd->tr.hb_stop_fd, .events = POLLIN};
	for (;;) {
		heartbeat_round(nd);
		if (poll(&p, 1, every_ms / 4 > 0 ? every_ms / 4 : 1) != 0 && (p.revents & POLLIN))
			return NULL;
	}
}

static int heartbeat_start(struct node *nd)
{
	nd->tr.hb_stop_fd = eventfd(0, EFD_CLOEXEC);
	if (nd->tr.hb_stop_fd < 0)
		return esd_neg_errno();
	int rc = pthread_create(&nd->tr.hb_thread, NULL, heartbeat_main, nd);
	if (rc) {
		close(nd->tr.hb_stop_fd);
		nd->tr.hb_stop_fd = -1;
		return -rc;
	}
	pthread_setname_np(nd->tr.hb_thread, "esdd-heartbeat");
	return 0;
}

static void heartbeat_stop(struct node *nd)
{
	uint64_t one = 1;
	if (nd->tr.hb_stop_fd < 0)
		return;
	if (write(nd->tr.hb_stop_fd, &one, sizeof(one)) == (ssize_t)sizeof(one))
		pthread_join(nd->tr.hb_thread, NULL);
	close(nd->tr.hb_stop_fd);
	nd->tr.hb_stop_fd = -1;
}

int node_trainer_init(struct node *nd)
{
	struct esd_cache_info ci;
	nd->tr.hb_stop_fd = -1;
	int rc = esd_nodedir_lock(nd->dir, &nd->tr.lock_fd);
	if (rc)
		return rc;
	nd->tr.count = nd->job.trainers;
	esd_cache_get_info(nd->cache, &ci);
	nd->tr.mark = calloc(ci.rows ? ci.rows : 1, sizeof(uint32_t));
	if (!nd->tr.mark)
		return -ENOMEM;
	for (uint32_t i = 0; i < nd->tr.count && !rc; i++)
		rc = make_slot(nd, i);
	if (rc) {
		ESD_ERR("node", "cannot make the trainers' shared areas: %s", esd_strerror(rc));
		return rc;
	}
	rc = esd_attach_listen(nd->dir, &nd->tr.listen_fd);
	return rc ? rc : heartbeat_start(nd);
}

void node_trainer_fini(struct node *nd)
{
	heartbeat_stop(nd);
	for (uint32_t i = 0; i < ESD_MAX_TRAINERS; i++) {
		struct node_trainer_slot *ts = &nd->tr.t[i];
		if (ts->fd >= 0)
			close(ts->fd);
		if (ts->xchg)
			munmap(ts->xchg, ts->xchg_len);
		if (ts->xchg_fd >= 0)
			close(ts->xchg_fd);
		if (ts->grads)
			munmap(ts->grads, ts->grads_len);
		if (ts->grad_fd >= 0)
			close(ts->grad_fd);
	}
	free(nd->tr.mark);
	if (nd->tr.listen_fd >= 0) {
		char p[600];
		snprintf(p, sizeof(p), "%s/%s", nd->dir, ESD_ATTACH_SOCK);
		unlink(p);
		close(nd->tr.listen_fd);
	}
	if (nd->tr.lock_fd >= 0)
		close(nd->tr.lock_fd);
}

/* A message to a peer that speaks the given protocol version. */
static struct esd_attach_msg msg_for(uint16_t version, enum esd_attach_op op)
{
	struct esd_attach_msg m = esd_attach_msg_make(op);
	m.version = version;
	return m;
}

static void refuse(int fd, uint16_t version, const char *why)
{
	struct esd_attach_msg m = msg_for(version, ESD_AT_REFUSE);
	snprintf(m.text, sizeof(m.text), "%s", why);
	esd_attach_send(fd, &m, NULL, 0);
	close(fd);
}

/* The lowest trainer slot without a trainer, or -1. */
static int free_slot(const struct node *nd)
{
	for (uint32_t i = 0; i < nd->tr.count; i++)
		if (nd->tr.t[i].fd < 0)
			return (int)i;
	return -1;
}

/* Welcome a checked trainer into slot i: the region, its exchange area
 * and (i > 0) its gradient slots. */
static void welcome(struct node *nd, int fd, pid_t pid, uint16_t version, int i)
{
	struct node_trainer_slot *ts = &nd->tr.t[i];
	struct esd_attach_msg m = msg_for(version, ESD_AT_WELCOME);
	m.rank = nd->rank;
	m.workers = nd->job.n;
	m.index = (uint32_t)i;
	m.trainers = nd->tr.count;
	m.heartbeat_ms = (uint32_t)nd->job.heartbeat_ms;
	m.peer_timeout_ms = (uint32_t)nd->job.peer_timeout_ms;
	if (!nd->job.key_file[0]) /* it started: the job says job.insecure */
		m.flags |= ESD_AT_INSECURE;
	int fds[3] = {esd_cache_fd(nd->cache), ts->xchg_fd, ts->grad_fd};
	if (send_to(ts, fd, &m, fds, i > 0 ? 3 : 2)) {
		close(fd);
		return;
	}
	pthread_mutex_lock(&nd->qmu);
	ts->fd = fd;
	ts->pid = (int)pid;
	ts->version = version;
	ts->stop_asked = false;
	ts->last_rx_ns = esd_now_ns();
	nd->tr.attached++;
	nd->tr.ever_attached = true;
	pthread_mutex_unlock(&nd->qmu);
	ts->published = ts->committed = false;
	ESD_INFO("node", "trainer pid %d attached (trainer %d of %u, attach protocol %u%s)",
		 (int)pid, i, nd->tr.count, version, version >= 4 ? ", heartbeats" : "");
}

/* Accept pending connections: each good one takes the lowest free trainer
 * slot; every other one is refused with the reason. */
static void accept_pending(struct node *nd)
{
	for (;;) {
		int fd;
		uid_t uid;
		pid_t pid;
		if (esd_attach_accept(nd->tr.listen_fd, &fd, &uid, &pid))
			return;
		/* read the HELLO first: closing with it unread would reset the
		 * connection and the peer would never see why */
		struct esd_attach_msg m;
		if (esd_attach_recv(fd, &m, NULL, NULL, 2000) || m.op != ESD_AT_HELLO) {
			ESD_WARN("node", "pid %d connected without a HELLO; closed", (int)pid);
			close(fd);
			continue;
		}
		if (uid != geteuid()) {
			ESD_WARN("node", "refused a trainer of uid %u (pid %d): this daemon runs as "
				 "uid %u", (unsigned)uid, (int)pid, (unsigned)geteuid());
			refuse(fd, m.version, "attach refused: different user");
			continue;
		}
		if (m.version < 3 && nd->bags) {
			ESD_WARN("node", "refused a trainer of attach protocol %u (pid %d): "
				 "data.stream %s has bags, which need protocol 3", m.version,
				 (int)pid, nd->job.stream);
			char why[80];
			const char *base = strrchr(nd->job.stream, '/');
			snprintf(why, sizeof(why), "%.40s has bags: needs a libesd of protocol 3",
				 base ? base + 1 : nd->job.stream);
			refuse(fd, m.version, why);
			continue;
		}
		int i = free_slot(nd);
		if (i < 0) {
			char why[80];
			snprintf(why, sizeof(why), "attach refused: the node's %u trainer(s) are "
				 "attached", nd->tr.count);
			refuse(fd, m.version, why);
			continue;
		}
		welcome(nd, fd, pid, m.version, i);
	}
}

/* Trainer i's gradient slot of cache slot s. */
static float *share_grad(struct node *nd, uint32_t i, uint32_t s)
{
	return i == 0 ? node_row_grad(nd, s) : nd->tr.t[i].grads + (size_t)s * nd->job.dim;
}

/* Zero trainer i's gradient slots of the rows of its share. */
static void zero_share(struct node *nd, uint32_t i, const uint32_t *slots)
{
	const struct node_trainer_slot *ts = &nd->tr.t[i];
	const uint32_t *s = slots + ts->kfirst;
	for (size_t k = 0; k < ts->nk; k++)
		memset(share_grad(nd, i, s[k]), 0, nd->job.dim * sizeof(float));
}

/* Trainer i's share of the micro-batch into its exchange area, then BATCH. */
static int publish(struct node *nd, uint32_t i, const struct order *o, const uint32_t *slots)
{
	struct node_trainer_slot *ts = &nd->tr.t[i];
	struct esd_xchg_hdr *h = ts->xchg;
	size_t T = nd->tables, D = nd->dense, f = ts->first;
	memcpy(esd_xchg_at(h, h->off_slots), slots + ts->kfirst, ts->nk * sizeof(uint32_t));
	memcpy(esd_xchg_at(h, h->off_keys), o->keys + ts->kfirst, ts->nk * sizeof(esd_key_t));
	if (h->off_bag_off) {
		uint32_t *bo = esd_xchg_at(h, h->off_bag_off);
		for (size_t j = 0; j <= ts->m * T; j++)
			bo[j] = o->bag_off[f * T + j] - ts->kfirst;
	}
	if (h->off_weights && ts->nk)
		memcpy(esd_xchg_at(h, h->off_weights), o->wts + ts->kfirst, ts->nk * sizeof(float));
	memcpy(esd_xchg_at(h, h->off_labels), o->labels + f, ts->m * sizeof(float));
	memcpy(esd_xchg_at(h, h->off_dense), o->dense + f * D, ts->m * D * sizeof(float));
	if (i > 0)
		memcpy(esd_xchg_at(h, h->off_params), node_dense_params(nd),
		       (size_t)nd->dense_params * sizeof(float));
	memset(esd_xchg_at(h, h->off_dgrad), 0, (size_t)nd->dense_params * sizeof(float));
	h->m = ts->m;
	h->nkeys = ts->nk;
	h->global_k = nd->job.derived.global_batch;
	atomic_store_explicit(&h->batch_iter, o->iter, memory_order_release);
	struct esd_attach_msg m = msg_for(ts->version, ESD_AT_BATCH);
	m.iter = o->iter;
	m.m = ts->m;
	m.nkeys = ts->nk;
	m.flags = o->checkpoint ? ESD_AT_CHECKPOINT : 0;
	m.global_k = nd->job.derived.global_batch;
	return send_to(ts, ts->fd, &m, NULL, 0);
}

/* The wall-clock time s seconds from now, HH:MM:SS, into buf. */
static void wall_clock_in(uint64_t s, char *buf, size_t len)
{
	time_t t = time(NULL) + (time_t)s;
	struct tm tm;
	if (!localtime_r(&t, &tm) || !strftime(buf, len, "%H:%M:%S", &tm))
		snprintf(buf, len, "?");
}

/* Fail the job: the reason logged and sent to every shard (an ERROR frame:
 * the shard fails the job with it, the other nodes get it at their next
 * barrier or while they wait for their trainers), then this daemon ends
 * non-zero. Returns -ESD_EJOBFAILED. */
static int fail_job(struct node *nd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_job(struct node *nd, const char *fmt, ...)
{
	char why[ESD_ATTACH_DETAIL + 128];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	ESD_ERR("node", "job failed: %s", why);
	for (uint32_t s = 0; s < ESD_JOB_MAX_SHARDS; s++)
		if (nd->links.link[s])
			esd_link_send_error(nd->links.link[s], -ESD_EJOBFAILED, why);
	return -ESD_EJOBFAILED;
}

/* Trainer i is gone (died, failed, or broke the protocol): its slot is
 * free. A committed share counts; otherwise nothing of it does and the
 * share waits for the next trainer that attaches. */
static void lose_trainer(struct node *nd, uint32_t i, const struct order *o, const uint32_t *slots,
			 const char *why)
{
	struct node_trainer_slot *ts = &nd->tr.t[i];
	(void)o;
	ESD_DBG("node", "trainer %u (pid %d) closed: %s", i, ts->pid, why);
	pthread_mutex_lock(&nd->qmu); /* the heartbeat thread sends under it */
	int fd = ts->fd;
	ts->fd = -1;
	ts->deaths++;
	nd->tr.attached--;
	nd->stats.trainer_deaths++;
	pthread_mutex_unlock(&nd->qmu);
	close(fd);
	if (ts->committed)
		return;
	if (ts->published)
		zero_share(nd, i, slots);
	ts->published = false;
}

/* Add the other trainers' row and dense gradients to trainer 0's, in
 * trainer order, each row of a share once; the losses likewise. */
static double sum_shares(struct node *nd, const uint32_t *slots)
{
	struct node_trainer *tr = &nd->tr;
	const uint32_t dim = nd->job.dim;
	float *dg0 = esd_xchg_at(tr->t[0].xchg, tr->t[0].xchg->off_dgrad);
	double loss = tr->t[0].loss;
	for (uint32_t i = 1; i < tr->count; i++) {
		struct node_trainer_slot *ts = &tr->t[i];
		const uint32_t *s = slots + ts->kfirst;
		if (++tr->mark_gen == 0) { /* wrapped: no stale mark may match */
			struct esd_cache_info ci;
			esd_cache_get_info(nd->cache, &ci);
			memset(tr->mark, 0, ci.rows * sizeof(uint32_t));
			tr->mark_gen = 1;
		}
		for (size_t k = 0; k < ts->nk; k++) {
			if (tr->mark[s[k]] == tr->mark_gen)
				continue;
			tr->mark[s[k]] = tr->mark_gen;
			float *g = node_row_grad(nd, s[k]);
			const float *gi = share_grad(nd, i, s[k]);
			for (uint32_t d = 0; d < dim; d++)
				g[d] += gi[d];
		}
		const float *dgi = esd_xchg_at(ts->xchg, ts->xchg->off_dgrad);
		for (uint32_t p = 0; p < nd->dense_params; p++)
			dg0[p] += dgi[p];
		loss += ts->loss;
	}
	return loss;
}

/* Split the micro-batch of m samples into the trainers' shares and zero
 * the gradient slots of trainers 1.. (trainer 0's are the region's, zeroed
 * by the caller). */
static void make_shares(struct node *nd, const struct order *o, const uint32_t *slots)
{
	const uint32_t T = nd->tr.count;
	for (uint32_t i = 0; i < T; i++) {
		struct node_trainer_slot *ts = &nd->tr.t[i];
		ts->first = (uint32_t)((uint64_t)o->m * i / T);
		ts->m = (uint32_t)((uint64_t)o->m * (i + 1) / T) - ts->first;
		ts->kfirst = o->bag_off[(size_t)ts->first * nd->tables];
		ts->nk = o->bag_off[((size_t)ts->first + ts->m) * nd->tables] - ts->kfirst;
		ts->published = ts->committed = false;
		ts->loss = 0;
		if (i > 0)
			zero_share(nd, i, slots);
	}
}

static int trainer_gone(struct node *nd, uint32_t i, const struct order *o,
			const uint32_t *slots, const char *why);

/* Publish every share that has a trainer and is not published yet. 0 or
 * -ESD_EJOBFAILED. */
static int publish_pending(struct node *nd, const struct order *o, const uint32_t *slots)
{
	for (uint32_t i = 0; i < nd->tr.count; i++) {
		struct node_trainer_slot *ts = &nd->tr.t[i];
		if (ts->fd < 0 || ts->published)
			continue;
		int rc = publish(nd, i, o, slots);
		char why[96];
		snprintf(why, sizeof(why), "%s", rc == -EPIPE || rc == -ECONNRESET
			 ? "its socket closed without a word" : "cannot hand it its share: ");
		if (rc && rc != -EPIPE && rc != -ECONNRESET)
			snprintf(why + strlen(why), sizeof(why) - strlen(why), "%s", esd_strerror(rc));
		if (rc == 0)
			ts->published = true;
		else if ((rc = trainer_gone(nd, i, o, slots, why)))
			return rc;
	}
	return 0;
}

/* Trainer i died, broke the protocol or fell silent (why): the job fails
 * at once, unless something replaces a dead trainer (job.restart_trainers)
 * or this one asked for a stop first (its end is a departure): then its
 * share waits for the next trainer that attaches. 0 or -ESD_EJOBFAILED. */
static int trainer_gone(struct node *nd, uint32_t i, const struct order *o,
			const uint32_t *slots, const char *why)
{
	struct node_trainer_slot *ts = &nd->tr.t[i];
	if (nd->job.restart_trainers || ts->stop_asked) {
		char until[16];
		wall_clock_in(nd->job.restart_wait_s, until, sizeof(until));
		ESD_WARN("node", "iteration %llu: trainer %u (pid %d) lost (%s); discarding its "
			 "gradients, waiting until %s (job.restart_wait %llu s) for a trainer to "
			 "attach to %s/%s and replay its share", (unsigned long long)o->iter, i,
			 ts->pid, why, until, (unsigned long long)nd->job.restart_wait_s, nd->dir,
			 ESD_ATTACH_SOCK);
		lose_trainer(nd, i, o, slots, why);
		return 0;
	}
	int rc = fail_job(nd, "node %u: trainer %u (pid %d) died: %s (iteration %llu; nothing "
			  "replaces a trainer without job.restart_trainers)", nd->rank, i, ts->pid,
			  why, (unsigned long long)o->iter);
	lose_trainer(nd, i, o, slots, why);
	return rc;
}

/* Read what trainer i sent: its COMMIT, a heartbeat, a stop request, its
 * failure, or its end. 0 or -ESD_EJOBFAILED. */
static int on_trainer_msg(struct node *nd, uint32_t i, const struct order *o,
			  const uint32_t *slots)
{
	struct node_trainer_slot *ts = &nd->tr.t[i];
	struct esd_attach_msg m;
	int rc = esd_attach_recv(ts->fd, &m, NULL, NULL, 0);
	if (rc == -ETIMEDOUT)
		return 0;
	if (rc == 0)
		ts->last_rx_ns = esd_now_ns();
	if (rc == 0 && m.op == ESD_AT_HEARTBEAT)
		return 0;
	if (rc == 0 && m.op == ESD_AT_FAILED) {
		ESD_ERR("node", "trainer %u (pid %d) failed: %s", i, ts->pid, m.detail);
		int frc = fail_job(nd, "node %u: trainer %u (pid %d) failed: %s", nd->rank, i,
				   ts->pid, m.detail);
		lose_trainer(nd, i, o, slots, "it failed");
		return frc;
	}
	if (rc == 0 && m.op == ESD_AT_STOP_REQ) {
		ts->stop_asked = true;
		node_ask_stop(nd, "a trainer asks for a stop");
		return 0;
	}
	if (rc == 0 && m.op == ESD_AT_COMMIT && m.iter == o->iter && ts->published) {
		ts->committed = true;
		ts->loss = m.loss;
		pthread_mutex_lock(&nd->qmu);
		ts->commits++;
		pthread_mutex_unlock(&nd->qmu);
		return 0;
	}
	char why[96];
	if (rc == -ECONNRESET)
		snprintf(why, sizeof(why), "its socket closed without a word");
	else if (rc)
		snprintf(why, sizeof(why), "%s", esd_strerror(rc));
	else
		snprintf(why, sizeof(why), "unexpected message (op %u, iteration %llu)", m.op,
			 (unsigned long long)m.iter);
	return trainer_gone(nd, i, o, slots, why);
}

/* A silent trainer that still wants the CPU: one of its threads is
 * running or waits for a core (state R in /proc/PID/task/TID/stat). Its
 * heartbeat thread is starved on a host whose cores are all taken, not
 * stopped (state T) or hung (every thread asleep past its beat). */
static bool trainer_runnable(int pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return false;
	bool runnable = false;
	struct dirent *e;
	while (!runnable && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char stat[64 + 256 + 8], line[512];
		snprintf(stat, sizeof(stat), "%s/%.255s/stat", path, e->d_name);
		FILE *f = fopen(stat, "r");
		if (!f)
			continue;
		/* "TID (comm) S ...": the state follows the last ')' */
		const char *rp = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
		runnable = rp && rp[1] == ' ' && rp[2] == 'R';
		fclose(f);
	}
	closedir(d);
	return runnable;
}

/* Version-4 trainers heard from not at all for job.peer_timeout_ms (a
 * stopped or hung process) are gone; one that is only starved of CPU
 * (trainer_runnable) gets up to STARVED_FACTOR timeouts. 0 or
 * -ESD_EJOBFAILED. */
#define STARVED_FACTOR 10
static int check_silence(struct node *nd, const struct order *o, const uint32_t *slots)
{
	const int64_t now = esd_now_ns(), limit = (int64_t)nd->job.peer_timeout_ms * ESD_NS_PER_MS;
	for (uint32_t i = 0; i < nd->tr.count; i++) {
		struct node_trainer_slot *ts = &nd->tr.t[i];
		if (ts->fd < 0 || ts->version < 4 || now - ts->last_rx_ns < limit)
			continue;
		if (now - ts->last_rx_ns < STARVED_FACTOR * limit && trainer_runnable(ts->pid))
			continue;
		char why[96];
		snprintf(why, sizeof(why), "silent for %.1f s (job.peer_timeout_ms %llu: stopped "
			 "or hung)", esd_ns_to_s(now - ts->last_rx_ns),
			 (unsigned long long)nd->job.peer_timeout_ms);
		int rc = trainer_gone(nd, i, o, slots, why);
		if (rc)
			return rc;
	}
	return 0;
}

/* No attached trainer holds a share it has not committed. */
static bool nobody_computes(const struct node *nd)
{
	for (uint32_t i = 0; i < nd->tr.count; i++) {
		const struct node_trainer_slot *ts = &nd->tr.t[i];
		if (ts->fd >= 0 && ts->published && !ts->committed)
			return false;
	}
	return true;
}

static bool all_committed(const struct node *nd)
{
	for (uint32_t i = 0; i < nd->tr.count; i++)
		if (!nd->tr.t[i].committed)
			return false;
	return true;
}

/* How long a node waits for a trainer to take a free index: a replacement
 * job.restart_wait (only with job.restart_trainers, or after the trainer
 * asked for a stop), the first trainers of the daemon FIRST_ATTACH_FACTOR
 * times ps.barrier_timeout + GIVE_UP_MARGIN_S (trainers that import torch
 * on a loaded host take a while to start). */
#define GIVE_UP_MARGIN_S    10
#define FIRST_ATTACH_FACTOR 5

/* The bound of the wait for a trainer to attach, in seconds, and what it
 * is in words. */
static uint64_t attach_bound(const struct node *nd, int missing, const char **what)
{
	if (nd->tr.t[missing].deaths) {
		*what = "job.restart_wait";
		return nd->job.restart_wait_s;
	}
	*what = "5 x ps.barrier_timeout + 10 s, the first start";
	return nd->job.barrier_timeout_s * FIRST_ATTACH_FACTOR + GIVE_UP_MARGIN_S;
}

/* The wait for trainer index 'missing' to be taken (since *since; -1: none
 * missing) within its bound: logged with the socket and until when at its
 * start and every 10 s, -ETIMEDOUT (logged) past it. */
static int attach_wait_check(struct node *nd, const struct order *o, int missing,
			     int64_t *since, int64_t *last_note)
{
	const char *what;
	const int64_t now = esd_now_ns();
	if (missing < 0) {
		*since = -1;
		return 0;
	}
	const uint64_t bound_s = attach_bound(nd, missing, &what);
	if (*since < 0) {
		char until[16];
		*since = now;
		*last_note = now;
		wall_clock_in(bound_s, until, sizeof(until));
		ESD_INFO("node", "iteration %llu: waiting until %s (%llu s: %s) for trainer %d of %u "
			 "to attach to %s/%s", (unsigned long long)o->iter, until,
			 (unsigned long long)bound_s, what, missing, nd->tr.count, nd->dir,
			 ESD_ATTACH_SOCK);
	}
	if (now - *since > (int64_t)bound_s * ESD_NS_PER_S) {
		ESD_ERR("node", "iteration %llu: no trainer %d of %u attached to %s/%s for %llu s "
			"(%s): is the trainer command right, and did it start?",
			(unsigned long long)o->iter, missing, nd->tr.count, nd->dir, ESD_ATTACH_SOCK,
			(unsigned long long)bound_s, what);
		return -ETIMEDOUT;
	}
	if (now - *last_note > 10 * ESD_NS_PER_S) {
		ESD_INFO("node", "iteration %llu: still waiting for trainer %d of %u on %s/%s "
			 "(%.0f s of %llu s)", (unsigned long long)o->iter, missing, nd->tr.count,
			 nd->dir, ESD_ATTACH_SOCK, esd_ns_to_s(now - *since),
			 (unsigned long long)bound_s);
		*last_note = now;
	}
	return 0;
}

/* One pass of the wait for the shares: publish, poll the sockets, serve
 * what came. 0, or why the iteration ends. */
static int serve_once(struct node *nd, const struct order *o, const uint32_t *slots)
{
	int rc = publish_pending(nd, o, slots);
	if (rc)
		return rc;
	struct pollfd p[2 + ESD_MAX_TRAINERS] = {{.fd = nd->tr.listen_fd, .events = POLLIN}};
	for (uint32_t i = 0; i < nd->tr.count; i++)
		p[1 + i] = (struct pollfd){.fd = nd->tr.t[i].fd, .events = POLLIN};
	nfds_t np = 1 + nd->tr.count;
	if (nd->dq.decider && nd->dq.hand_fd >= 0) /* the other nodes' next orders */
		p[np++] = (struct pollfd){.fd = nd->dq.hand_fd, .events = POLLIN};
	int r = poll(p, np, 200);
	if (r < 0 && errno != EINTR)
		return esd_neg_errno();
	if (esd_node_signal) {
		ESD_WARN("node", "iteration %llu: abandoned on signal %d",
			 (unsigned long long)o->iter, (int)esd_node_signal);
		return -EINTR;
	}
	/* a job that failed meanwhile (the barrier timed out waiting for
	 * this node's missing trainer, a node died) is not waited on;
	 * checked only while no trainer computes a share, whose gradient
	 * writes must not run into the next iteration's */
	rc = nobody_computes(nd) ? node_links_check(nd) : 0;
	if (!rc)
		rc = node_hand_flush(nd);
	if (rc)
		return rc;
	if (p[0].revents & POLLIN)
		accept_pending(nd);
	for (uint32_t i = 0; i < nd->tr.count && !rc; i++)
		if (nd->tr.t[i].fd >= 0 && (p[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
			rc = on_trainer_msg(nd, i, o, slots);
	return rc ? rc : check_silence(nd, o, slots);
}

int node_trainer_run(struct node *nd, const struct order *o, const uint32_t *slots,
		     double *loss)
{
	int64_t missing_since = -1, last_note = 0;
	make_shares(nd, o, slots);
	while (!all_committed(nd)) {
		int rc = serve_once(nd, o, slots);
		if (!rc)
			rc = attach_wait_check(nd, o, free_slot(nd), &missing_since, &last_note);
		if (rc)
			return rc;
	}
	*loss = sum_shares(nd, slots);
	return 0;
}

void node_trainer_dismiss(struct node *nd, int64_t timeout_ns)
{
	int64_t end = esd_now_ns() + timeout_ns;
	while (nd->tr.attached < nd->tr.count && esd_now_ns() < end && !esd_node_signal) {
		struct pollfd p = {.fd = nd->tr.listen_fd, .events = POLLIN};
		if (poll(&p, 1, 200) > 0)
			accept_pending(nd);
	}
	node_trainer_stop(nd);
}

void node_trainer_stop(struct node *nd)
{
	for (uint32_t i = 0; i < nd->tr.count; i++) {
		struct esd_attach_msg m = msg_for(nd->tr.t[i].version, ESD_AT_STOP);
		if (nd->tr.t[i].fd >= 0)
			send_to(&nd->tr.t[i], nd->tr.t[i].fd, &m, NULL, 0);
	}
}
