/*
 * The consequence of a decision (DESIGN §3 steps 1, 3 and 6) and Herald's
 * communication plan (Alg. 2: per worker, the DIRTY rows other workers
 * need next iteration, which is exactly step 1). Keys are walked in
 * ascending order so every per-worker list comes out sorted, as the cache
 * snapshots want them.
 */
#include "keytab_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Bits of a worker mask: few are set, and this needs no popcnt instruction. */
static inline uint32_t popc(uint64_t m)
{
	uint32_t c = 0;
	for (; m; m &= m - 1)
		c++;
	return c;
}

static const char *const cq_names[ESD_CQ_KINDS] = {"update_value", "miss_pull", "evict_push",
                                                   "update_grad"};

const char *esd_cq_kind_name(enum esd_cq_kind kind)
{
	return (unsigned)kind < ESD_CQ_KINDS ? cq_names[kind] : "?";
}

enum esd_xfer_kind esd_cq_xfer_kind(enum esd_cq_kind kind)
{
	switch (kind) {
	case ESD_CQ_MISS_PULL:
		return ESD_XFER_MISS_PULL;
	case ESD_CQ_EVICT_PUSH:
		return ESD_XFER_EVICT_PUSH;
	case ESD_CQ_UPDATE_VALUE:
	case ESD_CQ_UPDATE_GRAD:
		return ESD_XFER_UPDATE_PUSH;
	default:
		return ESD_XFER_OTHER;
	}
}

int esd_conseq_create(struct esd_conseq **out)
{
	if (!out)
		return -EINVAL;
	struct esd_conseq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	*out = cq;
	return 0;
}

void esd_conseq_free(struct esd_conseq *cq)
{
	if (!cq)
		return;
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		free(cq->off[q]);
		free(cq->keys[q]);
	}
	free(cq);
}

/* Size the lists for n workers and the given counts; off[kind] holds the
 * counts on entry and the starts on return (off[kind][n] = total). */
static int cq_layout(struct esd_conseq *cq, uint32_t n, uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS])
{
	if (cq->cap_n < n + 1) {
		for (int q = 0; q < ESD_CQ_KINDS; q++) {
			void *p = realloc(cq->off[q], (ESD_MAX_WORKERS + 1) * sizeof(uint32_t));
			if (!p)
				return -ENOMEM;
			cq->off[q] = p;
		}
		cq->cap_n = ESD_MAX_WORKERS + 1;
	}
	cq->n = n;
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		uint32_t s = 0;
		for (uint32_t j = 0; j < n; j++) {
			cq->off[q][j] = s;
			s += cnt[q][j];
		}
		cq->off[q][n] = s;
		if (cq->cap_keys[q] < s || !cq->keys[q]) {
			size_t nc = cq->cap_keys[q] ? cq->cap_keys[q] : 1024;
			while (nc < s)
				nc *= 2;
			void *p = realloc(cq->keys[q], nc * sizeof(esd_key_t));
			if (!p)
				return -ENOMEM;
			cq->keys[q] = p;
			cq->cap_keys[q] = nc;
		}
	}
	return 0;
}

void esd_conseq_costs(struct esd_conseq *cq, const int64_t *T)
{
	cq->total_cost = 0;
	memset(cq->worker_cost, 0, sizeof(cq->worker_cost));
	for (int q = 0; q < ESD_CQ_KINDS; q++) {
		cq->cost[q] = 0;
		for (uint32_t j = 0; j < cq->n; j++) {
			int64_t c = (int64_t)esd_conseq_count(cq, (enum esd_cq_kind)q, j) * T[j];
			cq->cost[q] += c;
			cq->worker_cost[j] += c;
		}
		cq->total_cost += cq->cost[q];
	}
}

static int compute(const struct esd_keytab *ckt, const struct esd_batch *b, const uint32_t *assign,
                   const int64_t *T, enum esd_sync sync, int plan_only, struct esd_conseq *cq)
{
	if (!ckt || !b || !assign || !T || !cq)
		return -EINVAL;
	struct esd_keytab *kt = (struct esd_keytab *)ckt; /* scratch only */
	int rc;
	if ((rc = esd_keytab_need(kt, b, assign)) || (rc = esd_keytab_sort(kt)))
		return rc;
	const uint32_t n = kt->n;
	uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	memset(cnt, 0, sizeof(cnt));
	uint32_t hits = 0, j;
	/* pass 1: counts */
	for (uint32_t u = 0; u < kt->count; u++) {
		const struct esd_keystate *s = &kt->st[u];
		const uint64_t need = kt->need[u];
		if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
			cnt[ESD_CQ_UPDATE_VALUE][s->dirty]++;
		if (plan_only)
			continue;
		for (uint64_t m_ = need & ~s->latest; m_; m_ &= m_ - 1) {
			j = (uint32_t)__builtin_ctzll(m_);
			cnt[ESD_CQ_MISS_PULL][j]++;
		}
		hits += (uint32_t)popc(need & s->latest);
		if (sync == ESD_SYNC_FULL_SET || (need & (need - 1)))
			for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				cnt[ESD_CQ_UPDATE_GRAD][j]++;
			}
	}
	if ((rc = cq_layout(cq, n, cnt)))
		return rc;
	uint32_t pos[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		for (uint32_t w = 0; w < n; w++)
			pos[q][w] = cq->off[q][w];
	/* pass 2: fill, keys ascending */
	for (uint32_t r = 0; r < kt->count; r++) {
		const uint32_t u = kt->sorted[r];
		const struct esd_keystate *s = &kt->st[u];
		const uint64_t need = kt->need[u];
		const esd_key_t key = kt->ukeys[u];
		if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
			cq->keys[ESD_CQ_UPDATE_VALUE][pos[ESD_CQ_UPDATE_VALUE][s->dirty]++] = key;
		if (plan_only)
			continue;
		for (uint64_t m_ = need & ~s->latest; m_; m_ &= m_ - 1) {
			j = (uint32_t)__builtin_ctzll(m_);
			cq->keys[ESD_CQ_MISS_PULL][pos[ESD_CQ_MISS_PULL][j]++] = key;
		}
		if (sync == ESD_SYNC_FULL_SET || (need & (need - 1)))
			for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				cq->keys[ESD_CQ_UPDATE_GRAD][pos[ESD_CQ_UPDATE_GRAD][j]++] = key;
			}
	}
	cq->hits = hits;
	esd_conseq_costs(cq, T);
	return 0;
}

int esd_conseq_compute(const struct esd_keytab *kt, const struct esd_batch *b,
                       const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                       struct esd_conseq *cq)
{
	return compute(kt, b, assign, T, sync, 0, cq);
}

int esd_comm_plan(const struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                  const int64_t *T, struct esd_conseq *cq)
{
	return compute(kt, b, assign, T, ESD_SYNC_ON_DEMAND, 1, cq);
}
