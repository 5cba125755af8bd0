/*
 * The snapshots' mirror kept by key (see mirror.h for what and why).
 */
#include "mirror.h"

#include "bigmem.h"

#include <esd/clock.h>
#include <esd/dispatch.h>
#include <esd/err.h>
#include <esd/log.h>
#include <esd/policy_rules.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A ring's places per row of capacity fit in 32 bits below this. */
#define KM_MAX_CAP (UINT32_C(1) << 28)

static void worker_free(struct km_worker *kw)
{
	esd_big_free(kw->ring, (size_t)kw->size * sizeof(*kw->ring));
	esd_big_free(kw->stale, esd_ring_stale_bytes(kw->size));
	free(kw->rstart);
	free(kw->riter);
	free(kw->abx);
	free(kw->abi);
	memset(kw, 0, sizeof(*kw));
}

/* An empty cache of cap rows (its scratch kept). */
static int worker_init(struct km_worker *kw, uint32_t cap)
{
	if (cap == 0 || cap > KM_MAX_CAP)
		return -EINVAL;
	const uint32_t size = ESD_RING_PER_ROW * cap;
	if (kw->size != size) {
		esd_big_free(kw->ring, (size_t)kw->size * sizeof(*kw->ring));
		esd_big_free(kw->stale, esd_ring_stale_bytes(kw->size));
		kw->ring = esd_big_zalloc((size_t)size * sizeof(*kw->ring));
		kw->stale = esd_big_zalloc(esd_ring_stale_bytes(size));
		kw->size = size;
		if (!kw->ring || !kw->stale) {
			esd_big_free(kw->ring, (size_t)size * sizeof(*kw->ring));
			esd_big_free(kw->stale, esd_ring_stale_bytes(size));
			kw->ring = NULL;
			kw->stale = NULL;
			kw->size = 0; /* none: the next call allocates again */
			return -ENOMEM;
		}
	} else {
		memset(kw->stale, 0, esd_ring_stale_bytes(size));
	}
	kw->cap = cap;
	kw->count = 0;
	kw->target = 1;
	kw->at_target = 0;
	kw->head = kw->tail = 0;
	kw->nr = 0;
	return 0;
}

int km_init(struct km *km, uint32_t n, const uint32_t *cap)
{
	memset(km, 0, sizeof(*km));
	if (n == 0 || n > KM_WORKERS)
		return -EINVAL;
	km->n = n;
	for (uint32_t w = 0; w < n; w++) {
		int rc = worker_init(&km->w[w], cap[w]);
		if (rc) {
			km_free(km);
			return rc;
		}
	}
	return 0;
}

void km_free(struct km *km)
{
	for (uint32_t w = 0; w < KM_WORKERS; w++)
		worker_free(&km->w[w]);
	free(km->rows);
	km->rows = NULL;
	km->cap_rows = 0;
}

/* Room for one more range in the log. */
static int range_room(struct km_worker *kw, size_t more)
{
	size_t c = kw->cap_r;
	if (esd_grow((void **)&kw->rstart, &c, kw->nr + more, sizeof(*kw->rstart)))
		return -ENOMEM;
	c = kw->cap_r;
	if (esd_grow((void **)&kw->riter, &c, kw->nr + more, sizeof(*kw->riter)))
		return -ENOMEM;
	kw->cap_r = c;
	return 0;
}

/* Append the places of iteration it, from 'start' on, to the log. */
static void range_add(struct km_worker *kw, uint32_t start, uint64_t it)
{
	if (kw->nr && kw->riter[kw->nr - 1] == it)
		return;
	kw->rstart[kw->nr] = start;
	kw->riter[kw->nr++] = it;
}

/* Move the live places to the ring's front, in order (the range log
 * rewritten alike), then tell each key its new place through the
 * directory (random lines, requested 16 ahead). O(places + live). */
static void compact(struct km_worker *kw, struct keydir *dir, uint32_t w)
{
	uint32_t *ring = kw->ring;
	const uint64_t *stale = kw->stale;
	const uint32_t tail = kw->tail;
	uint32_t q = 0;
	size_t ri = 0, nr = 0; /* the old range of the place read, new ranges */
	for (uint32_t r = kw->head, next; r < tail; r = next) {
		for (uint64_t live = esd_ring_live_word(stale, r, tail, &next); live;
		     live &= live - 1) {
			const uint32_t p = r / 64 * 64 + (uint32_t)__builtin_ctzll(live);
			while (ri + 1 < kw->nr && kw->rstart[ri + 1] <= p)
				ri++;
			/* new range nr - 1 <= old range ri: the log is rewritten
			 * in place behind the reads */
			const uint64_t it = kw->riter[ri];
			if (nr == 0 || kw->riter[nr - 1] != it) {
				kw->rstart[nr] = q;
				kw->riter[nr++] = it;
			}
			ring[q++] = ring[p];
		}
	}
	for (uint32_t i = 0; i < q; i++) {
		if (i + 16 < q)
			__builtin_prefetch(&keydir_km(dir, ring[i + 16])->pos[w], 1);
		keydir_km(dir, ring[i])->pos[w] = i;
	}
	esd_ring_clear(kw->stale, 0, tail);
	kw->head = 0;
	kw->tail = q;
	kw->nr = nr;
}

int km_from_blocks(struct km *km, struct keydir *dir, struct esd_cmeta *const *cm)
{
	for (uint32_t w = 0; w < km->n; w++) {
		struct km_worker *kw = &km->w[w];
		const uint32_t cap = esd_cmeta_capacity(cm[w]);
		int rc = worker_init(kw, cap);
		if (rc)
			return rc;
		const uint32_t count = esd_cmeta_count(cm[w]);
		uint32_t *order = malloc(((size_t)count + 1) * sizeof(*order));
		if (!order || range_room(kw, count)) {
			free(order);
			return -ENOMEM;
		}
		const size_t k = esd_cmeta_lru_order(cm[w], order, count);
		kw->target = esd_cmeta_emark_target(cm[w]);
		const uint64_t bit = UINT64_C(1) << w;
		uint64_t last = 0;
		for (size_t q = 0; q < k; q++) {
			const struct esd_cmeta_slot *sl = esd_cmeta_slot(cm[w], order[q]);
			const uint32_t x = keydir_probe(dir, sl->key);
			if (x == KEYDIR_NONE || !(keydir_at(dir, x)->cached & bit) ||
			    sl->last_use < last) {
				free(order);
				ESD_ERR("snap",
				        "worker %u: key %#llx not in the directory or out of "
				        "LRU order",
				        w, (unsigned long long)sl->key);
				return -ESD_EDIVERGED;
			}
			struct keydir_km *e = keydir_km(dir, x);
			kw->ring[q] = x;
			e->pos[w] = (uint32_t)q;
			e->freq[w] = sl->freq;
			e->mark[w] = sl->mark;
			kw->at_target += sl->mark == kw->target;
			range_add(kw, (uint32_t)q, sl->last_use);
			last = sl->last_use;
		}
		free(order);
		if (k != count)
			return -ESD_EDIVERGED;
		kw->tail = kw->count = (uint32_t)k;
	}
	return 0;
}

/* Long: the advance of the snapshots kept by key in one pass over the keys, so each
 * directory record is touched once per step. */
int km_advance(struct km *km, struct keydir *dir, const struct esd_keytab *kt,
               const uint32_t *found, const uint32_t *wlen, uint64_t t, enum esd_sync sync,
               struct esd_conseq *cq, int64_t *tA, int64_t *tB)
{
	const uint32_t n = km->n, cnt = kt->count;
	size_t total = 0;
	for (uint32_t w = 0; w < n; w++) {
		if (wlen[w] > km->w[w].cap)
			return -ENOSPC;
		total += wlen[w];
	}
	/* every allocation before any change */
	for (uint32_t w = 0; w < n; w++) {
		struct km_worker *kw = &km->w[w];
		size_t c = kw->cap_ab;
		if (esd_grow((void **)&kw->abx, &c, wlen[w], sizeof(uint32_t)))
			return -ENOMEM;
		c = kw->cap_ab;
		if (esd_grow((void **)&kw->abi, &c, wlen[w], sizeof(uint32_t)))
			return -ENOMEM;
		kw->cap_ab = c;
		if (range_room(kw, 1))
			return -ENOMEM;
	}
	size_t ecap = cq->cap_keys[ESD_CQ_EVICT_PUSH];
	if (esd_grow((void **)&cq->keys[ESD_CQ_EVICT_PUSH], &ecap, total, sizeof(esd_key_t)))
		return -ENOMEM;
	cq->cap_keys[ESD_CQ_EVICT_PUSH] = ecap;

	/* Compactions: one when a ring has no room left for the iteration's
	 * places, and at most one more, ahead of time, spread over the
	 * advances (the rings, filled alike, come due together): the ring
	 * with the least room, once that is under COMPACT_AHEAD iterations
	 * of its keys. */
	uint32_t due = n, lru_at[KM_WORKERS];
	uint64_t least = UINT64_MAX;
	for (uint32_t w = 0; w < n; w++) {
		struct km_worker *kw = &km->w[w];
		const uint64_t room = kw->size - kw->tail;
		if (room < wlen[w])
			compact(kw, dir, w);
		else if (room < (uint64_t)COMPACT_AHEAD * wlen[w] && room < least) {
			least = room;
			due = w;
		}
	}
	if (due < n)
		compact(&km->w[due], dir, due);
	for (uint32_t w = 0; w < n; w++) {
		struct km_worker *kw = &km->w[w];
		lru_at[w] = kw->tail;
		esd_ring_clear(kw->stale, kw->tail, kw->tail + wlen[w]);
	}

	/* Pass A, over the keys in ascending order: a present copy is
	 * touched (its old place stale, its new one the worker's next in key
	 * order), an absent one listed for pass B; the directory takes the
	 * iteration's outcome (DESIGN §3 step 6): the trainers hold the key,
	 * its latest value DIRTY on a lone trainer (on-demand) or at the PS
	 * only, every other copy OUTDATED by the masks alone. */
	uint32_t iw[KM_WORKERS] = {0}, na[KM_WORKERS] = {0}, pulls[KM_WORKERS] = {0};
	const int lone = sync == ESD_SYNC_ON_DEMAND;
	const uint32_t *sorted = kt->sorted;
	const uint64_t *needs = kt->need;
	for (uint32_t r = 0; r < cnt; r++) {
		if (r + KEYDIR_AHEAD < cnt) {
			const char *a =
			    (const char *)keydir_km(dir, found[sorted[r + KEYDIR_AHEAD]]);
			__builtin_prefetch(a, 1);
			__builtin_prefetch(a + 64, 1);
		}
		const uint32_t u = sorted[r];
		const uint32_t x = found[u];
		struct keydir_km *e = keydir_km(dir, x);
		const uint64_t need = needs[u], cached = e->d.cached, latest = e->d.latest;
		for (uint64_t m_ = need; m_; m_ &= m_ - 1) {
			const uint32_t w = (uint32_t)__builtin_ctzll(m_);
			struct km_worker *kw = &km->w[w];
			const uint32_t i = iw[w]++;
			pulls[w] += !((latest >> w) & 1);
			if ((cached >> w) & 1) {
				esd_ring_drop(kw->stale, e->pos[w]);
				kw->ring[lru_at[w] + i] = x;
				e->pos[w] = lru_at[w] + i;
				esd_rule_touch(&e->freq[w], &e->mark[w], kw->target,
				               &kw->at_target);
			} else {
				kw->abx[na[w]] = x;
				kw->abi[na[w]++] = i;
			}
		}
		e->d.cached |= need;
		/* as masks, not a branch on whether the key is shared */
		const uint64_t alone = -(uint64_t)(lone & !(need & (need - 1)));
		const uint32_t trainer = (uint32_t)__builtin_ctzll(need | UINT64_C(1) << 63);
		e->d.latest = need & alone;
		e->d.dirty = ESD_NO_WORKER ^ ((ESD_NO_WORKER ^ trainer) & (uint32_t)alone);
	}
	*tA = esd_now_ns();
	/* a copy not latest is pulled: the key table's pulls must be these
	 * (else it was not filled from this set, which must be reloaded) */
	for (uint32_t w = 0; w < n; w++)
		if (pulls[w] != esd_conseq_count(cq, ESD_CQ_MISS_PULL, w))
			return -ESD_EDIVERGED;

	/* Pass B, per worker over its absent keys in key order: a free row,
	 * or the oldest live place's key as victim. A victim still DIRTY on
	 * w after pass A is one no worker needs (pass A gave every needed
	 * key its new holder, never a worker that does not train it), so w
	 * does not push it as an update: it is evict-pushed. (The blocks,
	 * whose victims keep their states from before the iteration, look
	 * the victim up in w's update pushes instead.) */
	uint32_t eoff = 0;
	esd_key_t *ekeys = cq->keys[ESD_CQ_EVICT_PUSH];
	for (uint32_t w = 0; w < n; w++) {
		struct km_worker *kw = &km->w[w];
		cq->off[ESD_CQ_EVICT_PUSH][w] = eoff;
		const uint32_t e0 = eoff;
		const uint64_t bit = UINT64_C(1) << w;
		for (uint32_t q = 0; q < na[w]; q++) {
			if (kw->count == kw->cap) {
				esd_rule_full(&kw->target, &kw->at_target, kw->count);
				const uint32_t p = esd_ring_pop(kw->stale, &kw->head, lru_at[w]);
				const uint32_t y = p == ESD_RING_NONE ? KEYDIR_NONE : kw->ring[p];
				if (y >= dir->size || !(keydir_at(dir, y)->cached & bit)) {
					ESD_ERR("snap", "worker %u: no victim in a full cache", w);
					return -EUCLEAN;
				}
				struct keydir_km *v = keydir_km(dir, y);
				esd_rule_leave(v->mark[w], kw->target, &kw->at_target);
				kw->count--;
				v->d.cached &= ~bit;
				v->d.latest &= ~bit;
				if (v->d.dirty == w) {
					v->d.dirty = ESD_NO_WORKER;
					ekeys[eoff++] = v->d.key;
				}
			}
			struct keydir_km *e = keydir_km(dir, kw->abx[q]);
			const uint32_t p = lru_at[w] + kw->abi[q];
			kw->ring[p] = kw->abx[q];
			e->pos[w] = p;
			esd_rule_insert(&e->freq[w], &e->mark[w], kw->target, &kw->at_target);
			kw->count++;
		}
		qsort(ekeys + e0, eoff - e0, sizeof(esd_key_t), esd_cmp_key);
		kw->tail = lru_at[w] + wlen[w];
		if (wlen[w])
			range_add(kw, lru_at[w], t);
	}
	cq->off[ESD_CQ_EVICT_PUSH][n] = eoff;
	*tB = esd_now_ns();
	return 0;
}

/* A copy's state from the directory's masks. */
static uint8_t state_of(const struct keydir_ent *e, uint32_t w)
{
	return e->dirty == w                 ? ESD_ROW_DIRTY
	       : ((e->latest >> w) & 1) != 0 ? ESD_ROW_CLEAN
	                                     : ESD_ROW_OUTDATED;
}

int km_block(struct km *km, const struct keydir *dir, uint32_t w, uint64_t iter, void *mem,
             size_t len, struct esd_cmeta **out)
{
	struct km_worker *kw = &km->w[w];
	if (esd_grow((void **)&km->rows, &km->cap_rows, (size_t)kw->count + 1, sizeof(*km->rows)))
		return -ENOMEM;
	size_t k = 0, ri = 0;
	const uint64_t bit = UINT64_C(1) << w;
	for (uint32_t r = kw->head, next; r < kw->tail; r = next) {
		for (uint64_t live = esd_ring_live_word(kw->stale, r, kw->tail, &next); live;
		     live &= live - 1) {
			const uint32_t p = r / 64 * 64 + (uint32_t)__builtin_ctzll(live);
			while (ri + 1 < kw->nr && kw->rstart[ri + 1] <= p)
				ri++;
			const uint32_t x = kw->ring[p];
			if (x >= dir->size || !(keydir_at(dir, x)->cached & bit) ||
			    k >= kw->count || kw->nr == 0)
				return -ESD_EDIVERGED;
			const struct keydir_km *e = keydir_km(dir, x);
			km->rows[k++] = (struct esd_cmeta_row){.key = e->d.key,
			                                       .last_use = kw->riter[ri],
			                                       .freq = e->freq[w],
			                                       .mark = e->mark[w],
			                                       .state = state_of(&e->d, w)};
		}
	}
	if (k != kw->count)
		return -ESD_EDIVERGED;
	return esd_cmeta_from_rows(mem, len, kw->cap, ESD_POLICY_LRU, km->rows, k, iter, kw->target,
	                           out);
}

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			ESD_ERR("snap", "mirror: " __VA_ARGS__);                                   \
			return -ESD_EDIVERGED;                                                     \
		}                                                                                  \
	} while (0)

int km_check(const struct km *km, const struct keydir *dir)
{
	for (uint32_t w = 0; w < km->n; w++) {
		const struct km_worker *kw = &km->w[w];
		const uint64_t bit = UINT64_C(1) << w;
		CHECK(kw->head <= kw->tail && kw->tail <= kw->size,
		      "worker %u: ring [%u, %u) of %u", w, kw->head, kw->tail, kw->size);
		uint32_t live = 0, at = 0;
		for (uint32_t p = kw->head; p < kw->tail; p++) {
			if (!esd_ring_live(kw->stale, p))
				continue;
			live++;
			const uint32_t x = kw->ring[p];
			CHECK(x < dir->size && keydir_at(dir, x)->used &&
			          (keydir_at(dir, x)->cached & bit) &&
			          keydir_km(dir, x)->pos[w] == p,
			      "worker %u: place %u (entry %u) not its key's", w, p, x);
			const struct keydir_km *e = keydir_km(dir, x);
			CHECK(e->mark[w] >= 1 && e->mark[w] <= kw->target && e->freq[w] >= 1,
			      "worker %u: key %#llx mark %u of %u, freq %u", w,
			      (unsigned long long)e->d.key, e->mark[w], kw->target, e->freq[w]);
			at += e->mark[w] == kw->target;
		}
		size_t held = 0;
		for (size_t i = 0; i < dir->size; i++)
			held += keydir_at(dir, i)->used && (keydir_at(dir, i)->cached & bit);
		CHECK(live == kw->count && held == kw->count && kw->count <= kw->cap,
		      "worker %u: %u live places, %zu keys held, count %u of %u", w, live, held,
		      kw->count, kw->cap);
		CHECK(at == kw->at_target, "worker %u: %u marks at the target, %u counted", w, at,
		      kw->at_target);
		CHECK(kw->nr > 0 || live == 0, "worker %u: no iteration log", w);
	}
	return 0;
}

void km_reindex(struct km *km, const struct keydir *dir)
{
	const uint64_t mask = (UINT64_C(1) << km->n) - 1;
	for (size_t i = 0; i < dir->size; i++) {
		const struct keydir_km *e = keydir_km(dir, i);
		if (!e->d.used)
			continue;
		for (uint64_t m_ = e->d.cached & mask; m_; m_ &= m_ - 1) {
			const uint32_t w = (uint32_t)__builtin_ctzll(m_);
			km->w[w].ring[e->pos[w]] = (uint32_t)i;
		}
	}
}
