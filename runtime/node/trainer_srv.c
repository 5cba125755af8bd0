/*
 * The daemon's side of the attach protocol (docs/runtime.md): one trainer
 * at a time, checked by uid, handed the cache region and the exchange area
 * as fds; its death is seen at once on the socket, and the micro-batch is
 * replayed to the next trainer that attaches.
 */
#include "node.h"
#include "attach.h"
#include "rows.h"

#include <esd/clock.h>
#include <esd/err.h>
#include <esd/log.h>

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int node_trainer_init(struct node *nd)
{
	struct esd_xchg_hdr h;
	const uint32_t maxb = node_max_batch(nd);
	int rc;

	nd->tr.trainer_fd = -1;
	rc = esd_nodedir_lock(nd->dir, &nd->tr.lock_fd);
	if (rc)
		return rc;
	esd_xchg_layout(&h, maxb, nd->tables, nd->dense, nd->dense_params);
	nd->tr.xchg_fd = memfd_create("esd-xchg", MFD_CLOEXEC);
	if (nd->tr.xchg_fd < 0)
		return esd_neg_errno();
	if (ftruncate(nd->tr.xchg_fd, (off_t)h.total_size) < 0)
		return esd_neg_errno();
	nd->tr.xchg = mmap(NULL, h.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, nd->tr.xchg_fd, 0);
	if (nd->tr.xchg == MAP_FAILED) {
		nd->tr.xchg = NULL;
		return esd_neg_errno();
	}
	nd->tr.xchg_len = h.total_size;
	memcpy(nd->tr.xchg, &h, sizeof(h));
	return esd_attach_listen(nd->dir, &nd->tr.listen_fd);
}

void node_trainer_fini(struct node *nd)
{
	if (nd->tr.trainer_fd >= 0)
		close(nd->tr.trainer_fd);
	if (nd->tr.xchg)
		munmap(nd->tr.xchg, nd->tr.xchg_len);
	if (nd->tr.xchg_fd >= 0)
		close(nd->tr.xchg_fd);
	if (nd->tr.listen_fd >= 0) {
		char p[600];
		snprintf(p, sizeof(p), "%s/%s", nd->dir, ESD_ATTACH_SOCK);
		unlink(p);
		close(nd->tr.listen_fd);
	}
	if (nd->tr.lock_fd >= 0)
		close(nd->tr.lock_fd);
}

static void refuse(int fd, const char *why)
{
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_REFUSE);
	snprintf(m.text, sizeof(m.text), "%s", why);
	esd_attach_send(fd, &m, NULL, 0);
	close(fd);
}

/* Accept pending connections: the first good one becomes the trainer
 * (if none is attached), every other one is refused with the reason. */
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
			refuse(fd, "attach refused: different user");
			continue;
		}
		if (nd->tr.trainer_fd >= 0) {
			refuse(fd, "attach refused: another trainer is attached");
			continue;
		}
		m = esd_attach_msg_make(ESD_AT_WELCOME);
		m.rank = nd->rank;
		m.workers = nd->job.n;
		int fds[2] = {esd_cache_fd(nd->cache), nd->tr.xchg_fd};
		if (esd_attach_send(fd, &m, fds, 2)) {
			close(fd);
			continue;
		}
		nd->tr.trainer_fd = fd;
		ESD_INFO("node", "trainer pid %d attached", (int)pid);
	}
}

static int publish(struct node *nd, const struct order *o, const uint32_t *slots)
{
	struct esd_xchg_hdr *h = nd->tr.xchg;
	size_t n = (size_t)o->m * nd->tables;
	memcpy(esd_xchg_at(h, h->off_slots), slots, n * sizeof(uint32_t));
	memcpy(esd_xchg_at(h, h->off_keys), o->keys, n * sizeof(esd_key_t));
	memcpy(esd_xchg_at(h, h->off_labels), o->labels, o->m * sizeof(float));
	memcpy(esd_xchg_at(h, h->off_dense), o->dense, (size_t)o->m * nd->dense * sizeof(float));
	memset(esd_xchg_at(h, h->off_dgrad), 0, (size_t)nd->dense_params * sizeof(float));
	h->m = o->m;
	h->global_k = nd->job.global_batch;
	atomic_store_explicit(&h->batch_iter, o->iter, memory_order_release);
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_BATCH);
	m.iter = o->iter;
	m.m = o->m;
	m.global_k = nd->job.global_batch;
	return esd_attach_send(nd->tr.trainer_fd, &m, NULL, 0);
}

int node_trainer_run(struct node *nd, const struct order *o, const uint32_t *slots,
		     double *loss)
{
	bool published = false;
	int64_t waiting_since = esd_now_ns(), last_note = 0;

	for (;;) {
		if (nd->tr.trainer_fd >= 0 && !published) {
			if (publish(nd, o, slots) == 0) {
				published = true;
			} else {
				close(nd->tr.trainer_fd);
				nd->tr.trainer_fd = -1;
			}
		}
		struct pollfd p[2] = {{.fd = nd->tr.listen_fd, .events = POLLIN},
				      {.fd = nd->tr.trainer_fd, .events = POLLIN}};
		int r = poll(p, 2, 200);
		if (r < 0 && errno != EINTR)
			return esd_neg_errno();
		if (esd_node_signal) {
			ESD_WARN("node", "iteration %llu: stopping on signal %d",
				 (unsigned long long)o->iter, (int)esd_node_signal);
			return -EINTR;
		}
		if (p[0].revents & POLLIN)
			accept_pending(nd);
		if (nd->tr.trainer_fd < 0) {
			int64_t now = esd_now_ns();
			if (now - last_note > 10 * ESD_NS_PER_S) {
				ESD_INFO("node", "iteration %llu: waiting for a trainer on %s/%s (%.0f s)",
					 (unsigned long long)o->iter, nd->dir, ESD_ATTACH_SOCK,
					 esd_ns_to_s(now - waiting_since));
				last_note = now;
			}
			continue;
		}
		if (!(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		struct esd_attach_msg m;
		int rc = esd_attach_recv(nd->tr.trainer_fd, &m, NULL, NULL, 0);
		if (rc == 0 && m.op == ESD_AT_COMMIT && m.iter == o->iter) {
			*loss = m.loss;
			return 0;
		}
		if (rc == 0 && m.op == ESD_AT_STOP_REQ) {
			node_ask_stop(nd, "the trainer asks for a stop");
			continue;
		}
		if (rc == -ETIMEDOUT)
			continue;
		/* the trainer died or broke the protocol: discard its gradients and
		 * replay the micro-batch to the next trainer */
		ESD_WARN("node", "iteration %llu: trainer lost (%s); discarding its gradients, "
			 "waiting for a trainer to replay the micro-batch",
			 (unsigned long long)o->iter, rc ? esd_strerror(rc) : "unexpected message");
		close(nd->tr.trainer_fd);
		nd->tr.trainer_fd = -1;
		nd->stats.trainer_deaths++;
		for (size_t i = 0; i < (size_t)o->m * nd->tables; i++)
			memset(node_row_grad(nd, slots[i]), 0, nd->job.dim * sizeof(float));
		published = false;
		waiting_since = esd_now_ns();
	}
}

void node_trainer_stop(struct node *nd)
{
	if (nd->tr.trainer_fd < 0)
		return;
	struct esd_attach_msg m = esd_attach_msg_make(ESD_AT_STOP);
	esd_attach_send(nd->tr.trainer_fd, &m, NULL, 0);
}
