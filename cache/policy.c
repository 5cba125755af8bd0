/*
 * policy.c - the mutations of an esd_cmeta block: starting an iteration
 * (pin, touch, fill misses, evict), lookahead hints, state changes and
 * policy switches.
 *
 * begin_iter works in four steps so that its cost is O(n log C) for n
 * needed keys whatever the capacity:
 *   1. look every needed key up (batched, prefetching);
 *   2. move the pins and touch: needed slots are pinned (they may stay in
 *      the victim heap, pops skip them) and the present ones touched (use,
 *      frequency, Emark's mark at the target as it stands, new state, LRU
 *      ring entry; under Emark the clean ones parked) while their lines
 *      are at hand; slots pinned by the previous iteration, not needed
 *      now and not parked get their current order in the heap;
 *   3. walk the absent keys in ascending order: each gets the lowest free
 *      slot or the heap's minimum as victim (Emark's target can move on
 *      only here, after every present key took the old one); the pulls
 *      come out in key order;
 *   4. update the index for victims and new keys in one prefetching pass.
 * While step 3 runs every unpinned occupied slot is in the heap with its
 * exact order and untouched by step 3, and pinned ones are skipped, so the
 * victims are exactly "the smallest unpinned occupied slot in policy
 * order" at each eviction, which is what the reference model in
 * tests/cache/test_policy.c computes by linear scan. The per-key rules
 * (marks, uses, the LRU ring's places) are policy_rules.h's.
 */
#include "cmeta_impl.h"

#include <esd/err.h>

#include <string.h>

static bool hinted(const struct esd_cmeta *cm, uint64_t key)
{
	const uint64_t *h = cm_hints(cm);
	uint32_t lo = 0, hi = cm->nhints;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (h[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < cm->nhints && h[lo] == key;
}

/* Free an occupied slot: out of the index, the heap and the mark count.
 * Kept out of line so that set_state's common path (a state change on an
 * occupied slot, tens of thousands per iteration) needs no register
 * spills. */
__attribute__((noinline, cold)) static void release(struct esd_cmeta *cm, uint32_t slot)
{
	struct esd_cmeta_slot *s = &cm_slots(cm)[slot];

	esd_cm_index_remove(cm, s->key);
	esd_cm_heap_remove(cm, slot);
	if (s->parked) {
		s->parked = 0;
		cm->nparked--;
	}
	esd_rule_leave(s->mark, cm->emark_target, &cm->emark_at_target);
	cm_store8(&s->state, ESD_ROW_ABSENT);
	cm_store64(&s->key, 0);
	cm_store64(&s->clock, 0);
	s->last_use = 0;
	s->next_use = ESD_NEXT_USE_NONE;
	s->pin_iter = 0;
	s->freq = 0;
	s->mark = 0;
	cm->count--;
	esd_cm_free_set(cm, slot);
}

/* Keys strictly ascending, states (when given) OUTDATED, CLEAN or DIRTY.
 * Branch-free accumulation, vectorised (-O2 alone leaves these loops
 * scalar; the 64-bit compare needs AVX2 where the CPU has it): they run on
 * every begin_iter, over every needed key. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default"),
               optimize("tree-vectorize", "vect-cost-model=dynamic")))
#endif
static int
check_keys(const esd_key_t *keys, const uint8_t *states, size_t n)
{
	if (n && !keys)
		return -EINVAL;
	unsigned bad = 0;
	for (size_t i = 1; i < n; i++)
		bad |= keys[i - 1] >= keys[i];
	if (states)
		for (size_t i = 0; i < n; i++)
			bad |= (uint8_t)(states[i] - 1u) > 2u;
	return bad ? -EINVAL : 0;
}

/* Under LRU, step 2 requests the LRU stale bits' word of the slot this
 * many keys ahead (at steady state a ring position anywhere in the ring). */
#define PIN_AHEAD 8

/* One begin_iter: its arguments and what its steps share. */
struct bi {
	struct esd_cmeta *cm;
	uint64_t iter;
	const esd_key_t *keys;
	size_t n;
	const uint8_t *states;
	struct esd_cmeta_fill *fill;
	struct esd_cmeta_slot *sl;
	uint32_t *slots; /* fill->slots */
	bool lru, emark;
	bool rebuilt;      /* step 3 rebuilt the heap (every row unparked) */
	uint32_t nskipped; /* step 3's scratch entries of pinned[] */
	/* LRU: this iteration's slots become the newest entries, in key
	 * order, at [lru_at, lru_at + n), written by steps 2 and 3 (pops stop
	 * at the ring's tail, so they never see them half written) */
	uint32_t *ring, lru_at;
};

/* The arguments' checks; 0 or -errno (nothing changed). */
static int bi_check(struct esd_cmeta *cm, uint64_t iter, const esd_key_t *keys, size_t n,
                    const uint8_t *states, const struct esd_cmeta_fill *fill)
{
	if (!cm || !fill || iter == 0 || iter <= cm->last_iter)
		return -EINVAL;
	if (n > cm->capacity)
		return -ENOSPC;
	if (n && (!fill->pulls || !fill->evicts || !fill->slots))
		return -EINVAL;
	int rc = check_keys(keys, states, n);
	if (rc)
		return rc;
	return cm_counters_ok(cm) ? 0 : -EUCLEAN;
}

/* Emark: a row just pinned (its mark at the target) is parked now, while
 * its line is at hand, unless it is OUTDATED; only the pins left unparked
 * are listed for their lapse (cmeta_impl.h). The change of nparked. */
static inline int park_at_pin(struct esd_cmeta_slot *e)
{
	const uint8_t pk = e->state != ESD_ROW_OUTDATED;
	const int d = (int)pk - (int)e->parked;
	e->parked = pk;
	return d;
}

/* 2. Pin the needed keys and touch the present ones, each while its line
 * is at hand (step 1 prefetched every slot line it found): last use,
 * frequency, Emark's mark (at the target as it stands before any insert
 * of this iteration), the new state, and under LRU the ring entry. Under
 * LRU a needed slot's old entry in the ring goes stale (its new one, the
 * newest, is at the end). The pull a present key needs (an OUTDATED
 * copy) is written at its own place pulls[i] for step 3, which puts the
 * pulls in key order. */
static void bi_pin_present(struct bi *b)
{
	struct esd_cmeta *cm = b->cm;
	struct esd_cmeta_fill *fill = b->fill;
	uint64_t *stale = cm_lru_stale(cm);
	const uint32_t target = cm->emark_target;
	uint32_t at_target = cm->emark_at_target, nparked = cm->nparked;
	size_t outdated_n = 0, present_n = 0;
	for (size_t i = 0; i < b->n; i++) {
		if (b->lru && i + PIN_AHEAD < b->n) {
			const uint32_t sa = b->slots[i + PIN_AHEAD];
			const uint32_t p = sa != ESD_SLOT_NONE ? b->sl[sa].lru_pos : UINT32_MAX;
			if (p < cm->lru_tail)
				__builtin_prefetch(&stale[p / 64], 1);
		}
		const uint32_t s = b->slots[i];
		if (s == ESD_SLOT_NONE)
			continue;
		struct esd_cmeta_slot *e = &b->sl[s];
		e->pin_iter = b->iter;
		if (b->lru) {
			cm_lru_drop(cm, s);
			b->ring[b->lru_at + i] = s;
			e->lru_pos = b->lru_at + (uint32_t)i;
		}
		e->last_use = b->iter;
		esd_rule_touch(&e->freq, &e->mark, target, &at_target);
		const bool outdated = e->state == ESD_ROW_OUTDATED;
		fill->pulls[i] =
		    (struct esd_cmeta_pull){.key = b->keys[i], .slot = s, .outdated = outdated};
		outdated_n += outdated;
		present_n++;
		if (b->states) {
			/* pinned: no victim order to update (set_state) */
			cm_store64(&e->clock, 0);
			cm_store8(&e->state, b->states[i]);
		}
		if (b->emark)
			nparked += park_at_pin(e);
	}
	cm->nparked = nparked;
	cm->emark_at_target = at_target;
	fill->n_miss_outdated = outdated_n;
	fill->n_hits = present_n - outdated_n;
}

/* How far ahead the lapse of the pins requests slot lines and heap
 * positions: most lapses (Emark's parked rows) only set a flag, so the
 * requests need many of them to arrive. */
#define LAPSE_AHEAD 32

/* Under the policies other than LRU, the pins of the last iteration (prev)
 * that lapse now go (back) into the heap with their current order, or
 * under Emark are parked (cmeta_impl.h). A pinned slot may stay in the
 * heap with a stale entry meanwhile (taking it out would cost a heap
 * removal per hit); pops skip pinned slots. */
static void bi_lapse_pins(struct esd_cmeta *cm, uint64_t prev)
{
	struct esd_cmeta_slot *sl = cm_slots(cm);
	uint32_t *pinned = cm_pinned(cm), *hp = cm_heappos(cm);
	const bool emark = cm->policy == ESD_POLICY_EMARK;
	for (uint32_t i = 0; i < cm->npinned; i++) {
		uint32_t s = pinned[i];
		/* Two-stage prefetch: slot and heap position LAPSE_AHEAD ahead,
		 * half as far the heap lines that position names, for a lapse
		 * that will move an entry (not a row pinned again, nor one
		 * Emark parks): requests nothing will read fill the line-fill
		 * buffers that the needed ones wait for. */
		if (i + LAPSE_AHEAD < cm->npinned) {
			__builtin_prefetch(&sl[pinned[i + LAPSE_AHEAD]]);
			__builtin_prefetch(&hp[pinned[i + LAPSE_AHEAD]], 1);
		}
		const uint32_t sa =
		    i + LAPSE_AHEAD / 2 < cm->npinned ? pinned[i + LAPSE_AHEAD / 2] : ESD_SLOT_NONE;
		if (sa < cm->capacity && sl[sa].pin_iter == prev &&
		    !(emark && cm_emark_last(cm, &sl[sa])))
			cm_heap_prefetch(cm, hp[sa]);
		/* (a slot past the capacity: a damaged block's, skipped) */
		if (s >= cm->capacity || sl[s].state == ESD_ROW_ABSENT || sl[s].pin_iter != prev)
			continue;
		if (emark)
			esd_cm_emark_settle(cm, s);
		else if (hp[s])
			esd_cm_heap_update(cm, s);
		else
			esd_cm_heap_insert(cm, s);
	}
}

/* The first unpinned slot the policy pops (pinned ones popped on the way
 * are kept in pinned[*nskipped] to go back). Under Emark with rows
 * parked, a parked slot's entry is dropped, and the heap is rebuilt
 * (nothing parked) when it yields a row of the last class or runs dry:
 * a parked row may come first then. */
static uint32_t bi_pop_unpinned(struct bi *b, uint32_t *nskipped)
{
	struct esd_cmeta *cm = b->cm;
	uint32_t *pinned = cm_pinned(cm);
	for (;;) {
		const uint32_t s = esd_cm_heap_pop(cm);
		if (s == ESD_SLOT_NONE) {
			if (!cm->nparked)
				return s;
			esd_cm_heap_build(cm);
			b->rebuilt = true;
			continue;
		}
		const struct esd_cmeta_slot *e = &b->sl[s];
		if (e->pin_iter == b->iter) {
			pinned[(*nskipped)++] = s;
			continue;
		}
		if (cm->nparked && e->parked)
			continue;
		if (cm->nparked && cm_emark_last(cm, e)) {
			esd_cm_heap_build(cm);
			b->rebuilt = true;
			continue;
		}
		return s;
	}
}

/* A full cache's victim: the first unpinned slot in the policy's order,
 * out of the count and listed as an eviction. ESD_SLOT_NONE: none (a
 * damaged block, which esd_cmeta_verify names; n <= capacity guarantees
 * one). */
static uint32_t bi_victim(struct bi *b, uint32_t *nskipped)
{
	struct esd_cmeta *cm = b->cm;
	struct esd_cmeta_fill *fill = b->fill;
	/* Full: Emark's target may move on (ESD §8.1); the parked rows then
	 * leave the last class, so they go back into the heap. */
	const uint32_t target = cm->emark_target;
	esd_rule_full(&cm->emark_target, &cm->emark_at_target, cm->count);
	if (cm->emark_target != target && cm->nparked) {
		esd_cm_heap_build(cm);
		b->rebuilt = true;
	}
	const uint32_t s = bi_pop_unpinned(b, nskipped);
	if (s == ESD_SLOT_NONE)
		return s;
	struct esd_cmeta_slot *v = &b->sl[s];
	/* its index entry goes in step 4: the line requested now */
	cm_index_prefetch(cm, v->key);
	bool dirty = v->state == ESD_ROW_DIRTY;
	fill->evicts[fill->n_evicts++] =
	    (struct esd_cmeta_evict){.key = v->key, .clock = v->clock, .slot = s, .dirty = dirty};
	if (dirty)
		fill->n_evict_dirty++;
	else
		fill->n_evict_clean++;
	esd_rule_leave(v->mark, cm->emark_target, &cm->emark_at_target);
	cm->count--;
	return s;
}

/* 3. The pulls in key order, and the absent keys: each gets the lowest
 * free slot or the victim. A present key's pull, if any, was written at
 * pulls[i] (never behind n_pulls <= i): it is moved to its place in the
 * order and kept by the count (no branch on the data). */
static int bi_place_absent(struct bi *b)
{
	struct esd_cmeta *cm = b->cm;
	struct esd_cmeta_fill *fill = b->fill;
	uint32_t nskipped = 0; /* pinned[] is scratch from here on */
	for (size_t i = 0; i < b->n; i++) {
		uint32_t s = b->slots[i];
		if (s != ESD_SLOT_NONE) {
			const struct esd_cmeta_pull p = fill->pulls[i];
			fill->pulls[fill->n_pulls] = p;
			fill->n_pulls += p.outdated;
			continue;
		}
		/* a full cache has no free bit: skip the bitmap scan */
		s = cm->count < cm->capacity ? esd_cm_free_first(cm) : ESD_SLOT_NONE;
		if (s == ESD_SLOT_NONE) {
			if ((s = bi_victim(b, &nskipped)) == ESD_SLOT_NONE)
				return -EUCLEAN;
		} else {
			esd_cm_free_clear(cm, s);
		}
		struct esd_cmeta_slot *e = &b->sl[s];
		const esd_key_t key = b->keys[i];
		cm_store64(&e->key, key);
		cm_store64(&e->clock, 0);
		cm_store8(&e->state, b->states ? b->states[i] : ESD_ROW_OUTDATED);
		e->last_use = b->iter;
		e->next_use = cm->nhints && hinted(cm, key) ? cm->hint_iter : ESD_NEXT_USE_NONE;
		e->pin_iter = b->iter;
		esd_rule_insert(&e->freq, &e->mark, cm->emark_target, &cm->emark_at_target);
		if (b->emark)
			cm->nparked += park_at_pin(e);
		cm->count++;
		if (b->lru) {
			b->ring[b->lru_at + i] = s;
			e->lru_pos = b->lru_at + (uint32_t)i;
		}
		b->slots[i] = s;
		fill->pulls[fill->n_pulls++] =
		    (struct esd_cmeta_pull){.key = key, .slot = s, .outdated = 0};
		fill->n_miss_absent++;
	}
	uint32_t *pinned = cm_pinned(cm);
	for (uint32_t j = 0; j < nskipped; j++)
		esd_cm_heap_insert(cm, pinned[j]);
	b->nskipped = nskipped;
	return 0;
}

/* Emark: the pins left unparked, listed in key order for their lapse.
 * Steps 2 and 3 parked the pins that are not OUTDATED: with states given,
 * those whose new state is not; without, the ones that need no pull (an
 * insert or an OUTDATED copy is pulled), found by walking the pulls, in
 * key order too. Neither reads a slot line again, unless step 3 rebuilt
 * the heap (every row unparked then, later inserts parked anew). */
static uint32_t bi_list_unparked(const struct bi *b, uint32_t *pinned)
{
	uint32_t np = 0;
	if (b->rebuilt) {
		for (size_t i = 0; i < b->n; i++) {
			pinned[np] = b->slots[i];
			np += !b->sl[b->slots[i]].parked;
		}
	} else if (b->states) {
		for (size_t i = 0; i < b->n; i++) {
			pinned[np] = b->slots[i];
			np += b->states[i] == ESD_ROW_OUTDATED;
		}
	} else {
		const struct esd_cmeta_pull *pl = b->fill->pulls;
		const size_t npl = b->fill->n_pulls;
		for (size_t i = 0, j = 0; i < b->n; i++) {
			const bool pulled = j < npl && pl[j].key == b->keys[i];
			pinned[np] = b->slots[i];
			np += pulled;
			j += pulled;
		}
	}
	return np;
}

/* 4. The index: victims out, new keys in. Nothing before reads it (step
 * 1 looked every needed key up), so its random accesses are batched
 * here: the victims' lines were requested as step 3 chose them; a new
 * key's home line is the one step 1 probed, still in cache (no prefetch,
 * no hash for the OUTDATED pulls that insert nothing). Then this
 * iteration's pins are the new pinned list. */
static void bi_index_and_pins(struct bi *b)
{
	struct esd_cmeta *cm = b->cm;
	const struct esd_cmeta_fill *fill = b->fill;
	for (size_t j = 0; j < fill->n_evicts; j++)
		esd_cm_index_remove(cm, fill->evicts[j].key);
	for (size_t j = 0; j < fill->n_pulls; j++)
		if (!fill->pulls[j].outdated)
			esd_cm_index_insert(cm, fill->pulls[j].key, fill->pulls[j].slot);
	if (b->lru)
		esd_cm_lru_commit(cm, (uint32_t)b->n);
	uint32_t *pinned = cm_pinned(cm);
	uint32_t np = 0;
	if (b->emark) {
		np = bi_list_unparked(b, pinned);
	} else if (b->n) {
		memcpy(pinned, b->slots, b->n * sizeof(*pinned));
		np = (uint32_t)b->n;
	}
	/* unused entries zero (step 3 used some as scratch) */
	uint32_t used = cm->npinned > b->nskipped ? cm->npinned : b->nskipped;
	used = used > b->n ? used : (uint32_t)b->n;
	if (np < used)
		memset(pinned + np, 0, (used - np) * sizeof(*pinned));
	cm->npinned = np;
}

static int begin_iter(struct esd_cmeta *cm, uint64_t iter, const esd_key_t *keys, size_t n,
                      const uint8_t *states, struct esd_cmeta_fill *fill)
{
	int rc = bi_check(cm, iter, keys, n, states, fill);
	if (rc)
		return rc;
	const bool lru = cm->policy == ESD_POLICY_LRU;
	struct bi b = {.cm = cm, .iter = iter, .keys = keys, .n = n, .states = states, .fill = fill,
	               .sl = cm_slots(cm), .slots = fill->slots, .lru = lru,
	               .emark = cm->policy == ESD_POLICY_EMARK};
	const uint64_t prev = cm->last_iter;

	fill->n_pulls = fill->n_evicts = fill->n_hits = 0;
	fill->n_miss_absent = fill->n_miss_outdated = 0;
	fill->n_evict_clean = fill->n_evict_dirty = 0;
	esd_cmeta_find_batch(cm, keys, n, fill->slots); /* 1. */
	b.ring = cm_lru_ring(cm);
	b.lru_at = lru ? esd_cm_lru_reserve(cm, (uint32_t)n) : 0;
	bi_pin_present(&b); /* 2. */
	cm->last_iter = iter;
	if (!lru)
		bi_lapse_pins(cm, prev);
	if ((rc = bi_place_absent(&b))) /* 3. */
		return rc;
	bi_index_and_pins(&b); /* 4. */
	return 0;
}

int esd_cmeta_begin_iter(struct esd_cmeta *cm, uint64_t iter, const esd_key_t *keys, size_t n,
                         struct esd_cmeta_fill *fill)
{
	return begin_iter(cm, iter, keys, n, NULL, fill);
}

int esd_cmeta_begin_iter_states(struct esd_cmeta *cm, uint64_t iter, const esd_key_t *keys,
                                size_t n, const uint8_t *states, struct esd_cmeta_fill *fill)
{
	if (n && !states)
		return -EINVAL;
	return begin_iter(cm, iter, keys, n, states, fill);
}

/* Emark: the slot's state entered or left OUTDATED. Unpinned, its order
 * is brought up to date now; pinned, its lapse does it, so a pin parked
 * at its pin (listed for no lapse) is unparked and listed. */
static void emark_class_changed(struct esd_cmeta *cm, struct esd_cmeta_slot *s, uint32_t slot)
{
	if (!cm_pinned_now(cm, s)) {
		esd_cm_emark_reorder(cm, slot);
	} else if (s->parked && cm->npinned < cm->capacity) {
		s->parked = 0;
		cm->nparked--;
		cm_pinned(cm)[cm->npinned++] = slot;
	}
}

int esd_cmeta_set_state(struct esd_cmeta *cm, uint32_t slot, enum esd_row_state state,
                        uint64_t clock)
{
	if (!cm || slot >= cm->capacity || (unsigned)state > ESD_ROW_DIRTY)
		return -EINVAL;
	struct esd_cmeta_slot *s = &cm_slots(cm)[slot];
	const uint8_t old = s->state;
	if (old == ESD_ROW_ABSENT)
		return -EINVAL;
	if (__builtin_expect(state == ESD_ROW_ABSENT, 0)) {
		release(cm, slot);
		return 0;
	}
	cm_store64(&s->clock, clock);
	cm_store8(&s->state, (uint8_t)state);
	if (cm->policy == ESD_POLICY_EMARK &&
	    (old == ESD_ROW_OUTDATED) != (state == ESD_ROW_OUTDATED))
		emark_class_changed(cm, s, slot);
	return 0;
}

int esd_cmeta_set_states(struct esd_cmeta *cm, const uint32_t *slots, const uint8_t *states,
                         enum esd_row_state state, uint64_t clock, size_t n)
{
	if (!cm || (n && !slots))
		return -EINVAL;
	struct esd_cmeta_slot *sl = cm_slots(cm);
	const uint32_t cap = cm->capacity;
	/* the common case inline: a state change between OUTDATED, CLEAN and
	 * DIRTY; freeing a slot and errors as set_state */
	const bool emark = cm->policy == ESD_POLICY_EMARK;
	for (size_t q = 0; q < n; q++) {
		const uint32_t slot = slots[q];
		const unsigned st = states ? states[q] : (unsigned)state;
		if (__builtin_expect(slot >= cap || st - 1u > 2u, 0)) {
			int rc = esd_cmeta_set_state(cm, slot, (enum esd_row_state)st, clock);
			if (rc)
				return rc;
			continue;
		}
		struct esd_cmeta_slot *s = &sl[slot];
		const uint8_t old = s->state;
		if (old == ESD_ROW_ABSENT)
			return -EINVAL;
		cm_store64(&s->clock, clock);
		cm_store8(&s->state, (uint8_t)st);
		if (emark && (old == ESD_ROW_OUTDATED) != (st == ESD_ROW_OUTDATED))
			emark_class_changed(cm, s, slot);
	}
	return 0;
}

int esd_cmeta_mark_outdated(struct esd_cmeta *cm, esd_key_t key)
{
	uint32_t slot = esd_cmeta_find(cm, key);

	if (slot == ESD_SLOT_NONE)
		return 0;
	struct esd_cmeta_slot *s = &cm_slots(cm)[slot];
	if (s->state != ESD_ROW_OUTDATED) {
		cm_store8(&s->state, ESD_ROW_OUTDATED);
		if (cm->policy == ESD_POLICY_EMARK)
			emark_class_changed(cm, s, slot);
	}
	return 1;
}

/* Emark: the victim order of slots[0..n) (unpinned, just turned
 * OUTDATED) brought up to date in this order, each one's heap lines
 * requested 8 ahead (the heap positions were requested with the slots). */
static void reorder_batch(struct esd_cmeta *cm, const uint32_t *slots, uint32_t n)
{
	const uint32_t *hp = cm_heappos(cm);
	for (uint32_t i = 0; i < n && i < 8; i++)
		cm_heap_prefetch(cm, hp[slots[i]]);
	for (uint32_t i = 0; i < n; i++) {
		if (i + 8 < n)
			cm_heap_prefetch(cm, hp[slots[i + 8]]);
		esd_cm_emark_reorder(cm, slots[i]);
	}
}

/* One batch of mark_outdated_batch: keys[0..m) looked up and set
 * OUTDATED; the cached ones counted, the unpinned ones whose state
 * changed listed in moved[] (Emark), their heap positions requested. */
static size_t outdated_states(struct esd_cmeta *cm, const esd_key_t *keys, size_t m,
                              uint32_t *slots, uint32_t *moved, uint32_t *nmoved)
{
	struct esd_cmeta_slot *sl = cm_slots(cm);
	const uint32_t *hp = cm_heappos(cm);
	const bool emark = cm->policy == ESD_POLICY_EMARK;
	size_t cached = 0;
	uint32_t nm = 0;
	esd_cmeta_find_batch(cm, keys, m, slots);
	for (size_t i = 0; i < m; i++) {
		const uint32_t slot = slots[i];
		if (slot == ESD_SLOT_NONE)
			continue;
		cached++;
		struct esd_cmeta_slot *s = &sl[slot];
		if (s->state != ESD_ROW_OUTDATED) {
			cm_store8(&s->state, ESD_ROW_OUTDATED);
			if (emark && !cm_pinned_now(cm, s)) {
				__builtin_prefetch(&hp[slot]);
				moved[nm++] = slot;
			} else if (emark) {
				emark_class_changed(cm, s, slot);
			}
		}
	}
	*nmoved = nm;
	return cached;
}

/* In batches of 64 keys: each batch's states set, then under Emark the
 * previous batch's moved rows reordered, in the order their states
 * changed, while this batch's heap positions arrive. A reorder reads no
 * other slot's state, so the heap ends as if each row were reordered as
 * its state changed. */
size_t esd_cmeta_mark_outdated_batch(struct esd_cmeta *cm, const esd_key_t *keys, size_t n)
{
	if (!cm || !keys)
		return 0;
	uint32_t slots[64], moved[2][64], nm[2] = {0, 0};
	size_t cached = 0;
	int cur = 0;

	for (size_t base = 0; base < n; base += 64) {
		const size_t m = n - base < 64 ? n - base : 64;
		cur ^= 1;
		cached += outdated_states(cm, keys + base, m, slots, moved[cur], &nm[cur]);
		reorder_batch(cm, moved[cur ^ 1], nm[cur ^ 1]);
		nm[cur ^ 1] = 0;
	}
	reorder_batch(cm, moved[cur], nm[cur]);
	return cached;
}

/* Every pin listed for its lapse, in slot order: a rebuild unparked
 * them all, those Emark parked at their pin included. */
static void list_all_pins(struct esd_cmeta *cm)
{
	const struct esd_cmeta_slot *sl = cm_slots(cm);
	uint32_t *pinned = cm_pinned(cm), np = 0;
	for (uint32_t i = 0; i < cm->capacity; i++)
		if (sl[i].state != ESD_ROW_ABSENT && cm_pinned_now(cm, &sl[i]))
			pinned[np++] = i;
	if (np < cm->npinned)
		memset(pinned + np, 0, (cm->npinned - np) * sizeof(*pinned));
	cm->npinned = np;
}

int esd_cmeta_set_policy(struct esd_cmeta *cm, enum esd_policy policy)
{
	if (!cm || (unsigned)policy > ESD_POLICY_LOOKAHEAD)
		return -EINVAL;
	if (cm->policy == (uint32_t)policy)
		return 0;
	if (!cm_counters_ok(cm))
		return -EUCLEAN;
	cm->policy = policy;
	esd_cm_heap_build(cm);
	list_all_pins(cm);
	return 0;
}

/* next_use = value for every cached key of keys[0..n). Looked up in
 * prefetching batches; the victim heap only cares under LOOKAHEAD. */
static void set_next_use(struct esd_cmeta *cm, const uint64_t *keys, size_t n, uint64_t value)
{
	struct esd_cmeta_slot *sl = cm_slots(cm);
	uint32_t slots[64];

	for (size_t base = 0; base < n; base += 64) {
		size_t m = n - base < 64 ? n - base : 64;
		esd_cmeta_find_batch(cm, keys + base, m, slots);
		for (size_t i = 0; i < m; i++) {
			uint32_t s = slots[i];
			if (s == ESD_SLOT_NONE || sl[s].next_use == value)
				continue;
			sl[s].next_use = value;
			if (cm->policy == ESD_POLICY_LOOKAHEAD)
				esd_cm_heap_update(cm, s);
		}
	}
}

/* In-place sort of keys: quicksort (median of three) down to runs of 16,
 * then one insertion pass; heapsort if the recursion degenerates. The
 * dispatcher usually hands sorted keys, which the caller detects first. */
static void sift_u64(uint64_t *a, size_t i, size_t n)
{
	uint64_t v = a[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && a[c + 1] > a[c])
			c++;
		if (a[c] <= v)
			break;
		a[i] = a[c];
		i = c;
	}
	a[i] = v;
}

static void heapsort_u64(uint64_t *a, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift_u64(a, i, n);
	for (size_t i = n; i-- > 1;) {
		uint64_t t = a[0];
		a[0] = a[i];
		a[i] = t;
		sift_u64(a, 0, i);
	}
}

static void quick_u64(uint64_t *a, size_t n, int depth)
{
	while (n > 16) {
		if (depth-- == 0) {
			heapsort_u64(a, n);
			return;
		}
		uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
		uint64_t p = x < y ? (y < z ? y : x < z ? z : x) : (x < z ? x : y < z ? z : y);
		size_t i = 0, j = n - 1;
		for (;;) {
			while (a[i] < p)
				i++;
			while (a[j] > p)
				j--;
			if (i >= j)
				break;
			uint64_t t = a[i];
			a[i++] = a[j];
			a[j--] = t;
		}
		/* [0, j] <= p <= [j+1, n) */
		size_t left = j + 1;
		if (left < n - left) {
			quick_u64(a, left, depth);
			a += left;
			n -= left;
		} else {
			quick_u64(a + left, n - left, depth);
			n = left;
		}
	}
}

static void sort_u64(uint64_t *a, size_t n)
{
	size_t i;
	for (i = 1; i < n && a[i - 1] <= a[i]; i++)
		;
	if (i >= n)
		return;
	quick_u64(a, n, 2 * (64 - __builtin_clzll(n)));
	for (i = 1; i < n; i++) {
		uint64_t v = a[i];
		size_t j = i;
		while (j > 0 && a[j - 1] > v) {
			a[j] = a[j - 1];
			j--;
		}
		a[j] = v;
	}
}

int esd_cmeta_lookahead(struct esd_cmeta *cm, const esd_key_t *keys, size_t n, uint64_t iter)
{
	if (!cm || (n && !keys))
		return -EINVAL;
	if (n > cm->capacity)
		return -ENOMEM;
	if (!cm_counters_ok(cm))
		return -EUCLEAN;
	uint64_t *h = cm_hints(cm);

	/* Every cached key with a hint is in the previous set (inserts take
	 * their hint from it), so clearing that set clears every hint. */
	set_next_use(cm, h, cm->nhints, ESD_NEXT_USE_NONE);
	if (n)
		memcpy(h, keys, n * sizeof(*h));
	sort_u64(h, n);
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (m == 0 || h[m - 1] != h[i])
			h[m++] = h[i];
	size_t used = n > cm->nhints ? n : cm->nhints; /* keep unused entries zero */
	if (m < used)
		memset(h + m, 0, (used - m) * sizeof(*h));
	cm->nhints = (uint32_t)m;
	cm->hint_iter = iter;
	set_next_use(cm, h, m, iter);
	return 0;
}
