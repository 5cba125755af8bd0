/*
 * Fault injection for tests: below the reliable layer and the shaper's
 * caller, whole frames are dropped, duplicated or held back and sent after
 * the next frame (reordered), each with its probability, from a seeded
 * PRNG so a failing run can be replayed, and one chosen frame of the
 * reliable layer can be lost (drop_seq). Link-internal frames (LINK_ACK)
 * are subject to faults too: the reliable layer must survive losing them.
 */
#include "link_internal.h"

#include <esd/types.h>
#include <esd/clock.h>

#include <stdlib.h>
#include <string.h>

#define HOLD_MAX_NS (2 * ESD_NS_PER_MS)

static double uniform(uint64_t *s)
{
	return (double)(esd_splitmix64_next(s) >> 11) * 0x1.0p-53;
}

void esd_fault_init(struct fault *f, const struct esd_fault_opts *o)
{
	memset(f, 0, sizeof(*f));
	f->o = *o;
	f->rng = o->seed ? o->seed : 1;
	f->on = o->drop > 0 || o->dup > 0 || o->reorder > 0 || o->drop_seq;
}

void esd_fault_fini(struct fault *f)
{
	free(f->held);
	f->held = NULL;
}

static int send_one(struct esd_link *l, const void *p, size_t len, int64_t deadline)
{
	struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
	esd_link_shape_tx(l, len);
	pthread_mutex_lock(&l->w->tx_mu); /* also from a receive (a held frame due) */
	int rc = l->w->ops->send(l->w, &iov, 1, deadline);
	pthread_mutex_unlock(&l->w->tx_mu);
	return rc;
}

int esd_fault_flush(struct esd_link *l, int force)
{
	struct fault *f = &l->fault;
	if (!f->held || (!force && esd_now_ns() - f->held_since < HOLD_MAX_NS))
		return 0;
	uint8_t *p = f->held;
	f->held = NULL;
	int rc = send_one(l, p, f->held_len, esd_deadline_after(l->w->timeout_ns));
	free(p);
	return rc;
}

/* The first sending of the frame drop_seq names. */
static bool is_drop_seq(const struct fault *f, const uint8_t *p, size_t len)
{
	uint16_t flags;
	uint64_t seq;
	if (!f->o.drop_seq || len < ESD_FRAME_HDR_SIZE || p[5] == ESD_OP_LINK_ACK)
		return false;
	memcpy(&flags, p + 6, 2);
	memcpy(&seq, p + 16, 8);
	return (flags & ESD_FLAG_RELIABLE) && !(flags & ESD_FLAG_RETRANSMIT) &&
	       seq == f->o.drop_seq;
}

static int lower_send_locked(struct esd_link *l, const struct iovec *iov, int n,
			     int64_t deadline_ns);

int esd_lower_send(struct esd_link *l, const struct iovec *iov, int n, int64_t deadline_ns)
{
	pthread_mutex_lock(&l->w->tx_mu);
	int rc = lower_send_locked(l, iov, n, deadline_ns);
	if (!rc)
		atomic_store_explicit(&l->tx_ns, esd_now_ns(), memory_order_relaxed);
	pthread_mutex_unlock(&l->w->tx_mu);
	return rc;
}

static int lower_send_locked(struct esd_link *l, const struct iovec *iov, int n,
			     int64_t deadline_ns)
{
	struct fault *f = &l->fault;
	int rc;
	if (!f->on) {
		size_t total = 0;
		for (int i = 0; i < n; i++)
			total += iov[i].iov_len;
		esd_link_shape_tx(l, total);
		return l->w->ops->send(l->w, iov, n, deadline_ns);
	}
	for (int i = 0; i < n; i++) {
		const void *p = iov[i].iov_base;
		size_t len = iov[i].iov_len;
		if (is_drop_seq(f, p, len) || uniform(&f->rng) < f->o.drop) {
			atomic_fetch_add(&l->fault_drops, 1);
			continue;
		}
		if (!f->held && uniform(&f->rng) < f->o.reorder) {
			f->held = malloc(len);
			if (!f->held)
				return -ENOMEM;
			memcpy(f->held, p, len);
			f->held_len = len;
			f->held_since = esd_now_ns();
			atomic_fetch_add(&l->fault_reorders, 1);
			continue;
		}
		if ((rc = send_one(l, p, len, deadline_ns)))
			return rc;
		if (uniform(&f->rng) < f->o.dup) {
			atomic_fetch_add(&l->fault_dups, 1);
			if ((rc = send_one(l, p, len, deadline_ns)))
				return rc;
		}
		if ((rc = esd_fault_flush(l, 1)))
			return rc;
	}
	return 0;
}

int esd_lower_recv(struct esd_link *l, const uint8_t **frame, size_t *len, int64_t deadline_ns)
{
	if (l->fault.held) {
		/* Do not sit on a held frame while blocked: wake up to release it. */
		int64_t due = l->fault.held_since + HOLD_MAX_NS;
		if (deadline_ns < 0 || due < deadline_ns) {
			int rc = l->w->ops->recv(l->w, frame, len, due);
			if (rc != -ETIMEDOUT)
				return rc;
			if ((rc = esd_fault_flush(l, 1)))
				return rc;
		}
	}
	return l->w->ops->recv(l->w, frame, len, deadline_ns);
}
