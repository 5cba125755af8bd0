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

/* The 8 low bits of m, one per byte (bit j to bit 8j): byte j of the
 * broadcast keeps bit j only, and adding 0x7f carries it to bit 7. */
static inline uint64_t spread8(uint64_t m)
{
	const uint64_t y =
	    ((m & 255) * UINT64_C(0x0101010101010101)) & UINT64_C(0x8040201008040201);
	return ((y + UINT64_C(0x7f7f7f7f7f7f7f7f)) >> 7) & UINT64_C(0x0101010101010101);
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

/* The consequence and the per-worker lists in one pass over the keys in
 * ascending order (the snapshots' advance): every list is written into a
 * region per worker that is sure to hold it, so nothing needs counting
 * first; then the consequence's lists are packed into their layout. A
 * worker needs at most as many keys as its samples have occurrences (plus
 * the replicated ones), and at most 'count'; a holder pushes at most the
 * keys DIRTY on it. So the regions take about as many entries as the batch
 * has occurrences, whatever the number of workers. */
static int lists_one_pass(struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                          enum esd_sync sync, struct esd_conseq *cq, struct esd_wlists *wl)
{
	const uint32_t n = kt->n, count = kt->count;
	const struct esd_keystate *st = kt->st;
	uint64_t occj[ESD_MAX_WORKERS] = {0};
	uint32_t held[ESD_MAX_WORKERS + 1] = {0};
	for (uint32_t i = 0; i < b->k; i++)
		occj[assign[i]] += b->off[i + 1] - b->off[i]; /* assign < n: esd_keytab_need */
	for (uint32_t u = 0; u < count; u++)
		held[st[u].dirty < n ? st[u].dirty : n]++;
	uint32_t wp[ESD_MAX_WORKERS], pv[ESD_MAX_WORKERS], pm[ESD_MAX_WORKERS], pg[ESD_MAX_WORKERS];
	uint32_t vat[ESD_MAX_WORKERS];
	size_t total = 0, totv = 0;
	for (uint32_t w = 0; w < n; w++) {
		const uint64_t bound = occj[w] + kt->nrep;
		wl->start[w] = wp[w] = pm[w] = pg[w] = (uint32_t)total;
		vat[w] = pv[w] = (uint32_t)totv;
		total += bound < count ? bound : count;
		totv += held[w];
	}
	if (2 * total + totv > UINT32_MAX)
		return -EOVERFLOW;
	if (esd_grow((void **)&wl->keys, &wl->cap, total, sizeof(esd_key_t)) ||
	    esd_grow((void **)&wl->state, &wl->cap_state, total, 1) ||
	    esd_grow((void **)&wl->pack, &wl->cap_pack, 2 * total + totv, sizeof(esd_key_t)))
		return -ENOMEM;
	const uint64_t *needs = kt->need;
	const esd_key_t *ukeys = kt->ukeys;
	const uint32_t *sorted = kt->sorted;
	const int full = sync == ESD_SYNC_FULL_SET;
	esd_key_t *wk = wl->keys, *km = wl->pack, *kg = km + total, *kv = kg + total;
	uint8_t *ws = wl->state;
	for (uint32_t r = 0; r < count; r++) {
		const uint32_t u = sorted[r];
		const struct esd_keystate *s = &st[u];
		const uint64_t need = needs[u], lat = s->latest;
		const esd_key_t key = ukeys[u];
		if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
			kv[pv[s->dirty]++] = key;
		const int shared = full || (need & (need - 1));
		const uint8_t state = shared ? ESD_ROW_OUTDATED : ESD_ROW_DIRTY;
		/* every list written at its next place and kept by its count:
		 * no branch on the data (the place is inside the worker's
		 * region, which holds as many entries as the worker can need) */
		for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
			const uint32_t j = (uint32_t)__builtin_ctzll(m_);
			wk[wp[j]] = key;
			ws[wp[j]++] = state;
			km[pm[j]] = key;
			pm[j] += !((lat >> j) & 1);
			kg[pg[j]] = key;
			pg[j] += (uint32_t)shared;
		}
	}
	uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	const esd_key_t *from[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	uint32_t hits = 0;
	memset(cnt, 0, sizeof(cnt));
	for (uint32_t w = 0; w < n; w++) {
		const uint32_t at = wl->start[w];
		wl->len[w] = wp[w] - at;
		cnt[ESD_CQ_MISS_PULL][w] = pm[w] - at;
		cnt[ESD_CQ_UPDATE_GRAD][w] = pg[w] - at;
		cnt[ESD_CQ_UPDATE_VALUE][w] = pv[w] - vat[w];
		from[ESD_CQ_MISS_PULL][w] = km + at;
		from[ESD_CQ_UPDATE_GRAD][w] = kg + at;
		from[ESD_CQ_UPDATE_VALUE][w] = kv + vat[w];
		hits += wl->len[w] - cnt[ESD_CQ_MISS_PULL][w];
	}
	int rc = cq_layout(cq, n, cnt);
	if (rc)
		return rc;
	static const enum esd_cq_kind packed[3] = {ESD_CQ_UPDATE_VALUE, ESD_CQ_MISS_PULL,
	                                           ESD_CQ_UPDATE_GRAD};
	for (int q = 0; q < 3; q++) {
		const enum esd_cq_kind kind = packed[q];
		for (uint32_t w = 0; w < n; w++)
			if (cnt[kind][w])
				memcpy(cq->keys[kind] + cq->off[kind][w], from[kind][w],
				       cnt[kind][w] * sizeof(esd_key_t));
	}
	cq->hits = hits;
	return 0;
}

static int compute(const struct esd_keytab *ckt, const struct esd_batch *b, const uint32_t *assign,
                   const int64_t *T, enum esd_sync sync, int plan_only, struct esd_conseq *cq,
                   struct esd_wlists *wl)
{
	if (!ckt || !b || !assign || !T || !cq)
		return -EINVAL;
	struct esd_keytab *kt = (struct esd_keytab *)ckt; /* scratch only */
	int rc;
	if ((rc = esd_keytab_need(kt, b, assign)) || (rc = esd_keytab_sort(kt)))
		return rc;
	if (wl && !plan_only) {
		if ((rc = lists_one_pass(kt, b, assign, sync, cq, wl)))
			return rc;
		esd_conseq_costs(cq, T);
		return 0;
	}
	const uint32_t n = kt->n, count = kt->count;
	const struct esd_keystate *st = kt->st;
	const uint64_t *needs = kt->need;
	const esd_key_t *ukeys = kt->ukeys;
	const uint32_t *sorted = kt->sorted;
	const int full = sync == ESD_SYNC_FULL_SET;
	uint32_t cnt[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	uint32_t hit[ESD_MAX_WORKERS];
	memset(cnt, 0, sizeof(cnt));
	memset(hit, 0, sizeof(hit));
	uint32_t hits = 0, j;
	/* pass 1: counts */
	if (n <= 8 && !plan_only) {
		/* per-worker counts of up to 8 workers as byte lanes of one
		 * word per kind (a mask's bits spread to bytes by a multiply),
		 * flushed before a lane can overflow */
		uint64_t am = 0, ah = 0, ag = 0;
		uint32_t since = 0;
		for (uint32_t u = 0; u < count; u++) {
			const struct esd_keystate *s = &st[u];
			const uint64_t need = needs[u];
			if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
				cnt[ESD_CQ_UPDATE_VALUE][s->dirty]++;
			const uint64_t grad = full || (need & (need - 1)) ? need : 0;
			am += spread8(need & ~s->latest);
			ah += spread8(need & s->latest);
			ag += spread8(grad);
			if (++since == 255 || u + 1 == count) {
				for (uint32_t w = 0; w < n; w++) {
					cnt[ESD_CQ_MISS_PULL][w] += (uint32_t)(am >> (8 * w)) & 255;
					hit[w] += (uint32_t)(ah >> (8 * w)) & 255;
					cnt[ESD_CQ_UPDATE_GRAD][w] +=
					    (uint32_t)(ag >> (8 * w)) & 255;
				}
				am = ah = ag = 0;
				since = 0;
			}
		}
	} else {
		for (uint32_t u = 0; u < count; u++) {
			const struct esd_keystate *s = &st[u];
			const uint64_t need = needs[u];
			if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
				cnt[ESD_CQ_UPDATE_VALUE][s->dirty]++;
			if (plan_only)
				continue;
			for (uint64_t m_ = need & ~s->latest; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				cnt[ESD_CQ_MISS_PULL][j]++;
			}
			for (uint64_t m_ = need & s->latest; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				hit[j]++;
			}
			if (full || (need & (need - 1)))
				for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
					j = (uint32_t)__builtin_ctzll(m_);
					cnt[ESD_CQ_UPDATE_GRAD][j]++;
				}
		}
	}
	for (uint32_t w = 0; w < n; w++)
		hits += hit[w];
	if ((rc = cq_layout(cq, n, cnt)))
		return rc;
	uint32_t pos[ESD_CQ_KINDS][ESD_MAX_WORKERS];
	for (int q = 0; q < ESD_CQ_KINDS; q++)
		for (uint32_t w = 0; w < n; w++)
			pos[q][w] = cq->off[q][w];
	esd_key_t *kv = cq->keys[ESD_CQ_UPDATE_VALUE], *km = cq->keys[ESD_CQ_MISS_PULL],
	          *kg = cq->keys[ESD_CQ_UPDATE_GRAD];
	uint32_t *pv = pos[ESD_CQ_UPDATE_VALUE], *pm = pos[ESD_CQ_MISS_PULL],
	         *pg = pos[ESD_CQ_UPDATE_GRAD];
	/* pass 2: fill, keys ascending */
	for (uint32_t r = 0; r < count; r++) {
		const uint32_t u = sorted[r];
		const struct esd_keystate *s = &st[u];
		const uint64_t need = needs[u];
		const esd_key_t key = ukeys[u];
		if (s->dirty != ESD_NO_WORKER && need && need != (UINT64_C(1) << s->dirty))
			kv[pv[s->dirty]++] = key;
		if (plan_only)
			continue;
		for (uint64_t m_ = need & ~s->latest; m_; m_ &= m_ - 1) {
			j = (uint32_t)__builtin_ctzll(m_);
			km[pm[j]++] = key;
		}
		if (full || (need & (need - 1)))
			for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
				j = (uint32_t)__builtin_ctzll(m_);
				kg[pg[j]++] = key;
			}
	}
	cq->hits = hits;
	esd_conseq_costs(cq, T);
	return 0;
}

int esd_conseq_compute_lists(const struct esd_keytab *kt, const struct esd_batch *b,
                             const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                             struct esd_conseq *cq, struct esd_wlists *wl)
{
	return compute(kt, b, assign, T, sync, 0, cq, wl);
}

int esd_conseq_compute(const struct esd_keytab *kt, const struct esd_batch *b,
                       const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                       struct esd_conseq *cq)
{
	return compute(kt, b, assign, T, sync, 0, cq, NULL);
}

int esd_comm_plan(const struct esd_keytab *kt, const struct esd_batch *b, const uint32_t *assign,
                  const int64_t *T, struct esd_conseq *cq)
{
	return compute(kt, b, assign, T, ESD_SYNC_ON_DEMAND, 1, cq, NULL);
}
