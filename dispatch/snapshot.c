/*
 * The dispatcher's cache snapshots: one esd_cmeta per worker in private
 * memory, advanced with the cache's own policy code (esd_policy) so the
 * snapshot and the real cache cannot diverge. The order of the calls per
 * iteration follows docs/design.md §3 and is documented in esd/dispatch_snap.h;
 * a node daemon must make the same calls on its cache. One layout for
 * every policy, sync mode and number of workers: the blocks by worker,
 * beside a directory of where each key is cached (keydir.h).
 */
#include "bigmem.h"
#include "keydir.h"
#include "keytab_internal.h"

#include <esd/clock.h>
#include <esd/dispatch_snap.h>
#include <esd/err.h>
#include <esd/log.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* LRU rings are compacted ahead of need when a snapshot has room for fewer
 * than this many iterations of its keys (adv_compact_ahead). */
#define COMPACT_AHEAD 16

/* Bits of a worker mask: few are set, and this needs no popcnt instruction. */
static inline uint32_t popc(uint64_t m)
{
	uint32_t c = 0;
	for (; m; m &= m - 1)
		c++;
	return c;
}

struct esd_snapset {
	uint32_t n;
	uint64_t iter;
	struct esd_cmeta *cm[ESD_MAX_WORKERS];
	void *mem[ESD_MAX_WORKERS];
	size_t len[ESD_MAX_WORKERS];
	/* scratch */
	struct esd_wlists wl; /* needed keys, per worker, ascending */
	struct esd_cmeta_pull *pulls;
	struct esd_cmeta_evict *evicts;
	uint32_t *slots;
	size_t cap_f;
	uint32_t *found; /* directory entry of each key of the last fill */
	size_t cap_found;
	const struct esd_keytab *fill_kt; /* that fill: table, its build, */
	uint64_t fill_gen, fill_dirgen;   /* and the directory's layout */
	esd_key_t *others;                /* step 6: keys to outdate, per worker */
	size_t cap_others;
	struct keydir dir;              /* where each cached key lives, across workers */
	struct esd_advance_times times; /* of the last advance */
	/* HET mode (esd_snapset_set_staleness): a copy at most 'staleness'
	 * versions behind counts as latest and is not pulled */
	int het;
	uint32_t staleness;
};

int esd_snapset_set_staleness(struct esd_snapset *ss, uint32_t staleness)
{
	if (!ss)
		return -EINVAL;
	ss->het = 1;
	ss->staleness = staleness;
	ss->dir.keep_versions = 1;
	return 0;
}

/* HET: is the OUTDATED copy of entry e on worker j fresh enough to use? */
static int stale_usable(const struct esd_snapset *ss, const struct keydir_ent *e, uint32_t j)
{
	uint32_t slot = esd_cmeta_find(ss->cm[j], e->key);
	if (slot == ESD_SLOT_NONE)
		return 0;
	const struct esd_cmeta_slot *sl = esd_cmeta_slot(ss->cm[j], slot);
	return sl->state == ESD_ROW_OUTDATED && e->version - sl->clock <= ss->staleness;
}

static int alloc_block(struct esd_snapset *ss, uint32_t j, size_t len)
{
	void *m = esd_big_zalloc(len);
	if (!m)
		return -ENOMEM;
	esd_big_free(ss->mem[j], ss->len[j]);
	ss->mem[j] = m;
	ss->len[j] = len;
	return 0;
}

int esd_snapset_create(uint32_t n, const uint32_t *capacity, enum esd_policy policy,
                       struct esd_snapset **out)
{
	if (!out || !capacity || n == 0 || n > ESD_MAX_WORKERS)
		return -EINVAL;
	struct esd_snapset *ss = calloc(1, sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	ss->n = n;
	int rc = 0;
	size_t total = 0;
	for (uint32_t j = 0; j < n; j++)
		total += capacity[j];
	if ((rc = esd_keydir_init(&ss->dir, total < (1u << 25) ? total : (1u << 25))))
		goto fail_blocks;
	for (uint32_t j = 0; j < n; j++) {
		size_t len = esd_cmeta_bytes(capacity[j]);
		if (!len) {
			rc = -EINVAL;
			goto fail_blocks;
		}
		if ((rc = alloc_block(ss, j, len)))
			goto fail_blocks;
		if ((rc = esd_cmeta_init(ss->mem[j], len, capacity[j], policy, &ss->cm[j])))
			goto fail_blocks;
	}
	*out = ss;
	return 0;
fail_blocks:
	esd_snapset_free(ss);
	return rc;
}

void esd_snapset_free(struct esd_snapset *ss)
{
	if (!ss)
		return;
	for (uint32_t j = 0; j < ESD_MAX_WORKERS; j++)
		esd_big_free(ss->mem[j], ss->len[j]);
	free(ss->wl.keys);
	free(ss->wl.state);
	free(ss->wl.pack);
	free(ss->pulls);
	free(ss->evicts);
	free(ss->slots);
	free(ss->found);
	free(ss->others);
	esd_keydir_free(&ss->dir);
	free(ss);
}

uint32_t esd_snapset_workers(const struct esd_snapset *ss)
{
	return ss ? ss->n : 0;
}

/* Room for the entries of kt's keys (found[], and the directory, which
 * may rehash), the fill they belong to recorded. */
static int room_found(struct esd_snapset *ss, const struct esd_keytab *kt)
{
	size_t cap = ss->cap_found;
	if (esd_grow((void **)&ss->found, &cap, kt->count, sizeof(uint32_t)))
		return -ENOMEM;
	ss->cap_found = cap;
	if (esd_keydir_reserve(&ss->dir, kt->count))
		return -ENOMEM;
	ss->fill_kt = kt;
	ss->fill_gen = kt->gen;
	ss->fill_dirgen = ss->dir.gen;
	return 0;
}

/* Does found[] hold the entries of kt's keys (the fill's, the table not
 * rebuilt and the directory not rehashed since)? */
static int have_found(const struct esd_snapset *ss, const struct esd_keytab *kt)
{
	return ss->fill_kt == kt && ss->fill_gen == kt->gen && ss->fill_dirgen == ss->dir.gen &&
	       ss->found;
}

struct esd_cmeta *esd_snapset_cmeta(struct esd_snapset *ss, uint32_t j)
{
	if (!ss || j >= ss->n)
		return NULL;
	return ss->cm[j];
}

const struct esd_cmeta *esd_snapset_view(struct esd_snapset *ss, uint32_t j)
{
	return esd_snapset_cmeta(ss, j);
}

uint32_t esd_snapset_count(const struct esd_snapset *ss, uint32_t j)
{
	if (!ss || j >= ss->n)
		return 0;
	return esd_cmeta_count(ss->cm[j]);
}

uint64_t esd_snapset_iter(const struct esd_snapset *ss)
{
	return ss ? ss->iter : 0;
}

/* The directory from the snapshots themselves (after a load). */
static int rebuild_dir(struct esd_snapset *ss)
{
	size_t total = 0;
	for (uint32_t j = 0; j < ss->n; j++)
		total += esd_cmeta_count(ss->cm[j]);
	esd_keydir_clear(&ss->dir);
	if (esd_keydir_reserve(&ss->dir, total))
		return -ENOMEM;
	for (uint32_t j = 0; j < ss->n; j++) {
		const uint32_t cap = esd_cmeta_capacity(ss->cm[j]);
		for (uint32_t i = 0; i < cap; i++) {
			const struct esd_cmeta_slot *sl = esd_cmeta_slot(ss->cm[j], i);
			if (sl->state == ESD_ROW_ABSENT)
				continue;
			struct keydir_ent *e =
			    keydir_at(&ss->dir, keydir_insert(&ss->dir, sl->key));
			e->cached |= UINT64_C(1) << j;
			if (sl->state >= ESD_ROW_CLEAN)
				e->latest |= UINT64_C(1) << j;
			if (sl->state == ESD_ROW_DIRTY) {
				if (e->dirty != ESD_NO_WORKER)
					return -ESD_EDIVERGED;
				e->dirty = j;
			}
		}
	}
	for (size_t i = 0; i < ss->dir.size; i++) {
		const struct keydir_ent *e = keydir_at(&ss->dir, i);
		if (e->used && e->dirty != ESD_NO_WORKER && e->latest != (UINT64_C(1) << e->dirty))
			return -ESD_EDIVERGED;
	}
	return 0;
}

int esd_snapset_flush(struct esd_snapset *ss)
{
	if (!ss)
		return -EINVAL;
	for (uint32_t j = 0; j < ss->n; j++) {
		const uint32_t cap = esd_cmeta_capacity(ss->cm[j]);
		for (uint32_t i = 0; i < cap; i++) {
			const struct esd_cmeta_slot *sl = esd_cmeta_slot(ss->cm[j], i);
			if (sl->state != ESD_ROW_DIRTY)
				continue;
			int rc = esd_cmeta_set_state(ss->cm[j], i, ESD_ROW_CLEAN, sl->clock);
			if (rc)
				return rc;
			uint32_t x = esd_keydir_find(&ss->dir, sl->key);
			if (x != KEYDIR_NONE)
				keydir_at(&ss->dir, x)->dirty =
				    ESD_NO_WORKER; /* still latest: CLEAN */
		}
	}
	return 0;
}

int esd_snapset_verify(struct esd_snapset *ss)
{
	if (!ss)
		return -EINVAL;
	size_t occupied = 0, live = 0;
	for (uint32_t j = 0; j < ss->n; j++) {
		if (esd_cmeta_verify(ss->cm[j]))
			return -EINVAL;
		const uint32_t cap = esd_cmeta_capacity(ss->cm[j]);
		const uint64_t bit = UINT64_C(1) << j;
		for (uint32_t i = 0; i < cap; i++) {
			const struct esd_cmeta_slot *sl = esd_cmeta_slot(ss->cm[j], i);
			if (sl->state == ESD_ROW_ABSENT)
				continue;
			occupied++;
			uint32_t x = esd_keydir_find(&ss->dir, sl->key);
			if (x == KEYDIR_NONE)
				return -ESD_EDIVERGED;
			const struct keydir_ent *e = keydir_at(&ss->dir, x);
			if (!(e->cached & bit) ||
			    !!(e->latest & bit) != (sl->state >= ESD_ROW_CLEAN) ||
			    (e->dirty == j) != (sl->state == ESD_ROW_DIRTY))
				return -ESD_EDIVERGED;
		}
	}
	for (size_t i = 0; i < ss->dir.size; i++)
		if (keydir_at(&ss->dir, i)->used)
			live += (size_t)popc(keydir_at(&ss->dir, i)->cached);
	return live == occupied ? 0 : -ESD_EDIVERGED;
}

int esd_snapset_load(struct esd_snapset *ss, uint32_t j, const struct esd_cmeta *src)
{
	if (!ss || !src || j >= ss->n)
		return -EINVAL;
	int rc;
	if (src == ss->cm[j]) {
		/* the snapshot was edited in place */
		if (esd_cmeta_last_iter(src) > ss->iter)
			ss->iter = esd_cmeta_last_iter(src);
		return rebuild_dir(ss);
	}
	size_t len = esd_cmeta_block_bytes(src);
	if (!len)
		return -EINVAL;
	if (len > ss->len[j] && (rc = alloc_block(ss, j, len)))
		return rc;
	if ((rc = esd_cmeta_copy(ss->mem[j], ss->len[j], src, &ss->cm[j])))
		return rc;
	uint64_t it = esd_cmeta_last_iter(ss->cm[j]);
	if (it > ss->iter)
		ss->iter = it;
	return rebuild_dir(ss);
}

int esd_snapset_fill(struct esd_snapset *ss, struct esd_keytab *kt)
{
	if (!ss || !kt || kt->n != ss->n)
		return -EINVAL;
	int rc;
	const uint32_t cnt = kt->count;
	if ((rc = room_found(ss, kt)))
		return rc;
	const esd_key_t *ukeys = kt->ukeys;
	uint32_t *found = ss->found;
	struct esd_keystate *st = kt->st;
	const int het = ss->het;    /* loads hoisted: the stores below may alias */
	struct keydir kd = ss->dir; /* the table's address and layout too */
	for (uint32_t u = 0; u < cnt; u++) {
		keydir_prefetch_ahead(&kd, ukeys, cnt, u);
		/* a new key gets its entry now, cached nowhere (the same meaning
		 * as none): the advance then finds every key's entry here */
		const struct keydir_ent *e =
		    keydir_at(&kd, found[u] = keydir_insert(&kd, ukeys[u]));
		uint64_t latest = e->latest;
		if (het)
			for (uint64_t m_ = e->cached & ~e->latest; m_; m_ &= m_ - 1)
				if (stale_usable(ss, e, (uint32_t)__builtin_ctzll(m_)))
					latest |= m_ & -m_;
		st[u] = (struct esd_keystate){latest, e->cached, (uint8_t)e->dirty, {0}};
	}
	ss->dir.used = kd.used;
	return 0;
}

/* Room for the fills: every worker's needed keys must fit its snapshot
 * (-ENOSPC before anything changes), and the fill arrays hold the most
 * keys any worker needs or pushes. */
static int adv_reserve(struct esd_snapset *ss, const struct esd_conseq *cq)
{
	const uint32_t n = ss->n, *wlen = ss->wl.len;
	uint32_t maxw = 0, maxu = 0;
	for (uint32_t w = 0; w < n; w++)
		if (wlen[w] > maxw)
			maxw = wlen[w];
	for (uint32_t w = 0; w < n; w++)
		if (wlen[w] > esd_cmeta_capacity(ss->cm[w]))
			return -ENOSPC;
	for (uint32_t w = 0; w < n; w++)
		if (esd_conseq_count(cq, ESD_CQ_UPDATE_VALUE, w) > maxu)
			maxu = esd_conseq_count(cq, ESD_CQ_UPDATE_VALUE, w);
	size_t cap = ss->cap_f;
	const uint32_t maxf = maxw > maxu ? maxw : maxu;
	if (esd_grow((void **)&ss->pulls, &cap, maxf, sizeof(*ss->pulls)))
		return -ENOMEM;
	cap = ss->cap_f;
	if (esd_grow((void **)&ss->evicts, &cap, maxf, sizeof(*ss->evicts)))
		return -ENOMEM;
	cap = ss->cap_f;
	if (esd_grow((void **)&ss->slots, &cap, maxf, sizeof(uint32_t)))
		return -ENOMEM;
	ss->cap_f = cap;
	return 0;
}

/* Step 1: pushed DIRTY rows become CLEAN on their holder. Only HET mode
 * applies it as a pass of its own (its pulls read the states). Otherwise
 * every such copy takes its step-6 state later in the advance anyway
 * (begin_iter_states where the holder trains the key, the others'
 * OUTDATED pass where it does not), and no victim order tells CLEAN from
 * DIRTY (esd_cm_hent_of), so the step's one visible effect is that a pushed
 * row the holder's begin_iter evicts leaves clean: the eviction pass
 * looks the victim up in the holder's push list instead. */
static int adv_het_pushes(struct esd_snapset *ss, const struct esd_conseq *cq)
{
	for (uint32_t w = 0; ss->het && w < ss->n; w++) {
		const esd_key_t *keys = esd_conseq_keys(cq, ESD_CQ_UPDATE_VALUE, w);
		const uint32_t nu = esd_conseq_count(cq, ESD_CQ_UPDATE_VALUE, w);
		esd_cmeta_find_batch(ss->cm[w], keys, nu, ss->slots);
		for (uint32_t q = 0; q < nu; q++)
			if (ss->slots[q] == ESD_SLOT_NONE)
				return -ESD_EDIVERGED;
		esd_cmeta_set_states(ss->cm[w], ss->slots, NULL, ESD_ROW_CLEAN, 0, nu);
	}
	return 0;
}

/* LRU compactions spread over the advances: begin_iter compacts a
 * snapshot's ring when it has no room left (a write to every occupied
 * slot), and the snapshots, filled alike, come due within a few
 * iterations of each other. So at most one per advance is done here,
 * ahead of time: the snapshot with the least room, once that is under
 * COMPACT_AHEAD iterations of its keys. */
static int adv_compact_ahead(struct esd_snapset *ss)
{
	uint32_t due = ss->n;
	uint64_t least = UINT64_MAX;
	for (uint32_t w = 0; w < ss->n; w++) {
		const uint64_t room = esd_cmeta_lru_room(ss->cm[w]);
		if (room < (uint64_t)COMPACT_AHEAD * ss->wl.len[w] && room < least) {
			least = room;
			due = w;
		}
	}
	return due < ss->n ? esd_cmeta_lru_compact(ss->cm[due]) : 0;
}

/* HET: copies fresh enough are used as they are: drop them from the
 * fill's pulls (they stay OUTDATED); the rest take the PS version (kept
 * in the pull's outdated field). */
static void adv_het_fresh_pulls(struct esd_snapset *ss, uint32_t w, struct esd_cmeta_fill *fill)
{
	size_t k2 = 0;
	for (size_t q = 0; q < fill->n_pulls; q++) {
		uint32_t x = esd_keydir_find(&ss->dir, ss->pulls[q].key);
		const struct keydir_ent *e = x == KEYDIR_NONE ? NULL : keydir_at(&ss->dir, x);
		uint64_t v = e ? e->version : 0;
		const struct esd_cmeta_slot *sl = esd_cmeta_slot(ss->cm[w], ss->pulls[q].slot);
		if (ss->pulls[q].outdated && v - sl->clock <= ss->staleness)
			continue;
		ss->pulls[k2] = ss->pulls[q];
		ss->pulls[k2++].outdated = (uint32_t)v; /* reused: the version */
	}
	fill->n_pulls = k2;
}

/* The fill's victims: gone from the directory's masks, and the DIRTY ones
 * not pushed in step 1 listed as worker w's evict pushes (sorted) at
 * *eoff of cq's EVICT_PUSH keys. */
static int adv_evictions(struct esd_snapset *ss, struct esd_conseq *cq, uint32_t w,
                         const struct esd_cmeta_fill *fill, uint32_t *eoff)
{
	size_t ecap = cq->cap_keys[ESD_CQ_EVICT_PUSH];
	cq->off[ESD_CQ_EVICT_PUSH][w] = *eoff;
	if (esd_grow((void **)&cq->keys[ESD_CQ_EVICT_PUSH], &ecap, *eoff + fill->n_evicts,
	             sizeof(esd_key_t)))
		return -ENOMEM;
	cq->cap_keys[ESD_CQ_EVICT_PUSH] = ecap;
	const uint32_t e0 = *eoff;
	const uint64_t wbit = UINT64_C(1) << w;
	for (size_t q = 0; q < fill->n_evicts; q++) {
		uint32_t x = esd_keydir_find(&ss->dir, ss->evicts[q].key);
		if (x == KEYDIR_NONE)
			return -ESD_EDIVERGED;
		struct keydir_ent *e = keydir_at(&ss->dir, x);
		e->cached &= ~wbit;
		e->latest &= ~wbit;
		if (e->dirty == w)
			e->dirty = ESD_NO_WORKER;
		/* a DIRTY row its holder pushes as an update (step 1) leaves
		 * clean if it is evicted after */
		if (ss->evicts[q].dirty &&
		    (ss->het || !esd_conseq_has(cq, ESD_CQ_UPDATE_VALUE, w, ss->evicts[q].key)))
			cq->keys[ESD_CQ_EVICT_PUSH][(*eoff)++] = ss->evicts[q].key;
	}
	qsort(cq->keys[ESD_CQ_EVICT_PUSH] + e0, *eoff - e0, sizeof(esd_key_t), esd_cmp_key);
	return 0;
}

/* Steps 3-4 (and, under HET, the pulls' CLEAN and step 6) on worker w's
 * snapshot: pins, touches, inserts, evictions, checked against the
 * consequence's pulls. */
static int adv_fill_worker(struct esd_snapset *ss, struct esd_conseq *cq, uint32_t w, uint64_t t,
                           uint32_t *eoff)
{
	struct esd_cmeta_fill fill = {.pulls = ss->pulls, .evicts = ss->evicts, .slots = ss->slots};
	const uint32_t nw = ss->wl.len[w];
	const esd_key_t *keys = ss->wl.keys + ss->wl.start[w];
	/* step 6's states for this worker's copies of the keys it trains
	 * come with the lists; without HET begin_iter sets them in its pass
	 * over the slots (nothing between reads them) */
	const uint8_t *states = ss->wl.state + ss->wl.start[w];
	int rc = ss->het ? esd_cmeta_begin_iter(ss->cm[w], t, keys, nw, &fill)
	                 : esd_cmeta_begin_iter_states(ss->cm[w], t, keys, nw, states, &fill);
	if (rc)
		return rc;
	if (ss->het)
		adv_het_fresh_pulls(ss, w, &fill);
	if (fill.n_pulls != esd_conseq_count(cq, ESD_CQ_MISS_PULL, w))
		return -ESD_EDIVERGED;
	if ((rc = adv_evictions(ss, cq, w, &fill, eoff)))
		return rc;
	/* pulled rows become CLEAN (HET: at the PS's version). Without HET
	 * this is left out: every pulled slot is a needed one, whose step-6
	 * state begin_iter_states set, and a state change of a pinned slot has
	 * no other effect (esd_cmeta_set_state leaves a pinned slot's victim
	 * order as it is). Then step 6 for this worker's copies of the keys
	 * it trained (HET: after the pulls' versions). */
	if (ss->het) {
		for (size_t q = 0; q < fill.n_pulls; q++)
			esd_cmeta_set_state(ss->cm[w], ss->pulls[q].slot, ESD_ROW_CLEAN,
			                    ss->pulls[q].outdated);
		esd_cmeta_set_states(ss->cm[w], ss->slots, states, ESD_ROW_ABSENT, 0, nw);
	}
	return 0;
}

/* Step 6 on the workers that hold a latest copy but trained none (listed
 * per worker in key-number order into ss->others, counts in no[]), and
 * the directory: trainers hold it now; the latest value is DIRTY on a
 * lone trainer (on-demand) or at the PS only. The directory entries of
 * the keys are those the fill found (found_ok), unless the table was
 * rebuilt or the directory rehashed since: then they are looked up. */
static int adv_directory(struct esd_snapset *ss, const struct esd_keytab *kt, enum esd_sync sync,
                         int found_ok, uint32_t *no)
{
	const uint32_t n = ss->n, cnt = kt->count;
	size_t ocap = ss->cap_others;
	if (esd_grow((void **)&ss->others, &ocap, (size_t)n * cnt, sizeof(esd_key_t)))
		return -ENOMEM;
	ss->cap_others = ocap;
	const int lone = sync == ESD_SYNC_ON_DEMAND, het = ss->het;
	const struct esd_keystate *st = kt->st;
	const uint64_t *needs = kt->need;
	const esd_key_t *ukeys = kt->ukeys;
	const uint32_t *found = ss->found;
	esd_key_t *others = ss->others;
	for (uint32_t u = 0; u < cnt; u++) {
		/* the entries' lines, last seen by the fill, requested ahead */
		if (found_ok && u + KEYDIR_AHEAD < cnt)
			__builtin_prefetch(keydir_at(&ss->dir, found[u + KEYDIR_AHEAD]), 1);
		const struct esd_keystate *s = &st[u];
		const uint64_t need = needs[u];
		const esd_key_t key = ukeys[u];
		for (uint64_t m_ = s->latest & ~need; m_; m_ &= m_ - 1) {
			const uint32_t j = (uint32_t)__builtin_ctzll(m_);
			others[(size_t)j * cnt + no[j]++] = key;
		}
		const uint32_t x = found_ok ? found[u] : keydir_insert(&ss->dir, key);
		struct keydir_ent *e = keydir_at(&ss->dir, x);
		e->cached |= need;
		if (het)
			e->version++; /* full-set: the PS applies it once this iteration */
		/* latest: DIRTY on a lone trainer (on-demand), else at the PS; as
		 * masks, not a branch on whether the key is shared (GCC makes the
		 * selects one) */
		const uint64_t alone = -(uint64_t)(lone & !(need & (need - 1)));
		const uint32_t trainer = (uint32_t)__builtin_ctzll(need | UINT64_C(1) << 63);
		e->latest = need & alone;
		e->dirty = ESD_NO_WORKER ^ ((ESD_NO_WORKER ^ trainer) & (uint32_t)alone);
	}
	return 0;
}

int esd_snapset_advance(struct esd_snapset *ss, struct esd_keytab *kt, const struct esd_batch *b,
                        const uint32_t *assign, const int64_t *T, enum esd_sync sync,
                        struct esd_conseq *cq)
{
	if (!ss || !kt || !cq || kt->n != ss->n)
		return -EINVAL;
	const int64_t t0 = esd_now_ns();
	int rc = esd_conseq_compute_lists(kt, b, assign, T, sync, cq, &ss->wl);
	if (rc)
		return rc;
	const int64_t t1 = esd_now_ns();
	const uint32_t n = ss->n;
	const uint64_t t = ss->iter + 1;
	/* the fill gave every key its directory entry, unless the table was
	 * rebuilt or the directory rehashed since: then adv_directory looks
	 * them up (and inserts) itself */
	const int found_ok = have_found(ss, kt);
	if (!found_ok && (rc = esd_keydir_reserve(&ss->dir, kt->count)))
		return rc;
	if ((rc = adv_reserve(ss, cq)) || (rc = adv_het_pushes(ss, cq)) ||
	    (rc = adv_compact_ahead(ss)))
		return rc;
	/* evictions are known only now: cq's EVICT_PUSH lists are laid out
	 * worker by worker */
	uint32_t eoff = 0;
	for (uint32_t w = 0; w < n; w++)
		if ((rc = adv_fill_worker(ss, cq, w, t, &eoff)))
			return rc;
	cq->off[ESD_CQ_EVICT_PUSH][n] = eoff;
	const int64_t t2 = esd_now_ns();
	uint32_t no[ESD_MAX_WORKERS] = {0};
	if ((rc = adv_directory(ss, kt, sync, found_ok, no)))
		return rc;
	const int64_t t3 = esd_now_ns();
	for (uint32_t w = 0; w < n; w++)
		esd_cmeta_mark_outdated_batch(ss->cm[w], ss->others + (size_t)w * kt->count, no[w]);
	esd_conseq_costs(cq, kt, T);
	ss->iter = t;
	ss->times = (struct esd_advance_times){t1 - t0, t2 - t1, t3 - t2, esd_now_ns() - t3};
	return 0;
}

const struct esd_advance_times *esd_snapset_advance_times(const struct esd_snapset *ss)
{
	return ss ? &ss->times : NULL;
}

/* ---- HET key versions across a checkpoint ------------------------------- */

size_t esd_snapset_versions(const struct esd_snapset *ss, esd_key_t *keys, uint64_t *versions,
                            size_t cap)
{
	if (!ss)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < ss->dir.size; i++) {
		const struct keydir_ent *e = keydir_at(&ss->dir, i);
		if (!e->used || !e->version)
			continue;
		if (n < cap) {
			keys[n] = e->key;
			versions[n] = e->version;
		}
		n++;
	}
	return n;
}

int esd_snapset_set_versions(struct esd_snapset *ss, const esd_key_t *keys,
                             const uint64_t *versions, size_t n)
{
	if (!ss || (n && (!keys || !versions)))
		return -EINVAL;
	if (esd_keydir_reserve(&ss->dir, n))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		keydir_at(&ss->dir, keydir_insert(&ss->dir, keys[i]))->version = versions[i];
	return 0;
}
