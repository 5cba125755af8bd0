/*
 * libesd: the trainer's side of the attach protocol (esd/libesd.h). The
 * cache region is mapped with gradient slots writable and everything else
 * read-only, so a trainer bug cannot corrupt rows or metadata.
 */
#include <esd/libesd.h>
#include <esd/cache.h>
#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include "attach.h"
#include "xchg.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct esd_trainer {
	int fd;
	struct esd_cache *cache;
	struct esd_xchg_hdr *xchg;
	size_t xchg_len;
	float *grads; /* trainer index > 0: its own gradient slots, else NULL */
	size_t grads_len;
	struct esd_trainer_info info;
	uint64_t cur_iter;
	uint32_t *ident; /* a version-1 area: bag_off[j] = j */
};

static bool no_daemon_yet(int rc)
{
	return rc == -ENOENT || rc == -ECONNREFUSED;
}

int esd_trainer_attach_wait(const char *dir, int timeout_ms, struct esd_trainer **out)
{
	int64_t end = esd_now_ns() + (int64_t)timeout_ms * ESD_NS_PER_MS;
	int fd = -1, rc;
	/* connect quietly until the daemon listens, then attach for real */
	while (no_daemon_yet(rc = esd_attach_connect(dir, &fd)) && timeout_ms > 0 &&
	       esd_now_ns() < end)
		esd_sleep_ns(50 * ESD_NS_PER_MS);
	if (!rc) {
		close(fd);
		rc = esd_trainer_attach(dir, out);
	} else {
		ESD_ERR("libesd", "cannot connect to %s/esdd.sock%s: %s (is esdd running with "
			"--dir %s?)", dir, timeout_ms > 0 ? " in time" : "", esd_strerror(rc), dir);
	}
	return rc;
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
	in->bags = t->xchg->version == ESD_XCHG_VERSION_BAGS;
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
	struct esd_trainer *t = calloc(1, sizeof(*t));
	struct esd_attach_msg m;
	int fds[3], nfds = 3, rc;

	if (!t)
		return -ENOMEM;
	t->fd = -1;
	rc = esd_attach_connect(dir, &t->fd);
	if (rc) {
		ESD_ERR("libesd", "cannot connect to %s/esdd.sock: %s (is esdd running with "
			"--dir %s?)", dir, esd_strerror(rc), dir);
		goto err;
	}
	m = esd_attach_msg_make(ESD_AT_HELLO);
	m.pid = (uint32_t)getpid();
	rc = esd_attach_send(t->fd, &m, NULL, 0);
	if (rc)
		goto err;
	rc = esd_attach_recv(t->fd, &m, fds, &nfds, 30000);
	if (rc)
		goto err;
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

	fill_info(t, &m);
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

int esd_trainer_next(struct esd_trainer *t, int timeout_ms, struct esd_microbatch *mb)
{
	struct esd_attach_msg m;
	int rc = esd_attach_recv(t->fd, &m, NULL, NULL, timeout_ms);
	if (rc)
		return rc;
	if (m.op == ESD_AT_STOP)
		return 1;
	struct esd_xchg_hdr *h = t->xchg;
	const size_t nbags = (size_t)m.m * h->tables;
	if (m.op != ESD_AT_BATCH || m.m > h->max_batch || m.nkeys > h->max_keys)
		return -EPROTO;
	if (h->version == ESD_XCHG_VERSION_BAGS) {
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
	return esd_attach_send(t->fd, &m, NULL, 0);
}

int esd_trainer_request_stop(struct esd_trainer *t)
{
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_STOP_REQ);
	return esd_attach_send(t->fd, &m, NULL, 0);
}

void esd_trainer_detach(struct esd_trainer *t)
{
	if (!t)
		return;
	if (t->xchg)
		munmap(t->xchg, t->xchg_len);
	if (t->grads)
		munmap(t->grads, t->grads_len);
	esd_cache_close(t->cache);
	if (t->fd >= 0)
		close(t->fd);
	free(t->ident);
	free(t);
}
