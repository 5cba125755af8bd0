/*
 * heap.c - victim order and free slots of an esd_cmeta block.
 *
 * Victims: an indexed 4-ary min-heap over the occupied, unpinned slots,
 * each entry carrying its slot's position in the policy's order as three
 * 64-bit words (see esd_cm_hent_of), so comparisons stay inside the heap's own
 * cache lines instead of chasing slot records. Insert, remove, update and
 * pop are O(log C); since every order ends with the (unique) key, the
 * minimum is unique and the victim sequence does not depend on how the
 * heap happens to be arranged.
 *
 * Free slots: a three-level bitmap (bit set = free; a bit of level l+1
 * says "word of level l has a bit set"), so the lowest free slot - the
 * deterministic choice the contract asks for - is three word scans away.
 */
#include "cmeta_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void esd_cm_hent_of(const struct esd_cmeta *cm, uint32_t slot, struct cm_hent *e)
{
	const struct esd_cmeta_slot *s = &cm_slots(cm)[slot];

	e->c = s->key;
	e->slot = slot;
	e->pad = 0;
	switch (cm->policy) {
	case ESD_POLICY_LRU: /* (last_use, key) */
		e->a = s->last_use;
		e->b = 0;
		break;
	case ESD_POLICY_LFU: /* (freq, last_use, key) */
		e->a = s->freq;
		e->b = s->last_use;
		break;
	case ESD_POLICY_EMARK: /* (OUTDATED first, mark, freq, key) */
		e->a = ((uint64_t)(s->state != ESD_ROW_OUTDATED) << 32) | s->mark;
		e->b = s->freq;
		break;
	default: /* LOOKAHEAD: (next_use desc, last_use, key) */
		e->a = ~s->next_use;
		e->b = s->last_use;
		break;
	}
}

/* The heap is 4-ary: half the levels of a binary heap, and with 32-byte
 * entries the four children of a node fill two adjacent cache lines
 * (positions p -> children 4p+1..4p+4, each group of siblings on a
 * 128-byte boundary). A pop walks log4(C) levels. (Prefetching the
 * grandchildren - eight lines a level - measured slower: it floods the
 * line-fill buffers.)
 *
 * Under Emark the victims are held in two heaps sharing the area: A (the
 * OUTDATED rows, which Emark takes first) from the area's front, B (the
 * others) from its back, its positions counting down (cmeta_impl.h). A
 * row that becomes OUTDATED moves into A near its bottom instead of
 * sifting past every clean row of one heap; the other policies use A
 * alone. */
#define ARITY 4

/* One of the two heaps: position p is entry h + st * p. */
struct hv {
	struct cm_hent *h;
	ptrdiff_t st;
	uint32_t *n;
	uint32_t tag; /* heappos bit of its entries */
};

static inline struct hv heap_a(struct esd_cmeta *cm)
{
	return (struct hv){cm_heap(cm), 1, &cm->heap_n, 0};
}
static inline struct hv heap_b(struct esd_cmeta *cm)
{
	return (struct hv){cm_heap_b(cm), -1, &cm->heap_nb, CM_HEAPPOS_B};
}
static inline struct cm_hent *at(const struct hv *v, uint32_t p)
{
	return v->h + v->st * (ptrdiff_t)p;
}
/* The heap a slot's entry belongs in now. */
static inline struct hv heap_of(struct esd_cmeta *cm, uint32_t slot)
{
	return cm_heap_b_holds(cm, &cm_slots(cm)[slot]) ? heap_b(cm) : heap_a(cm);
}

/* Slot numbers read from the heap are checked before they index anything
 * (a damaged block's entries are trash; esd_cmeta_verify names them). */
static inline void put(struct esd_cmeta *cm, const struct hv *v, uint32_t pos,
                       const struct cm_hent *e)
{
	*at(v, pos) = *e;
	if (e->slot < cm->capacity)
		cm_heappos(cm)[e->slot] = (pos + 1) | v->tag;
}

static void sift_up(struct esd_cmeta *cm, const struct hv *v, uint32_t pos, const struct cm_hent *e)
{
	while (pos > 0) {
		uint32_t parent = (pos - 1) / ARITY;
		if (!cm_hless(e, at(v, parent)))
			break;
		put(cm, v, pos, at(v, parent));
		pos = parent;
	}
	put(cm, v, pos, e);
}

/* Smallest of the children c..c+3 that exist (c < n). With all four
 * present, a two-round tournament: the first two comparisons are
 * independent, so the dependent chain is two compares, not three. */
static inline uint32_t min_child(const struct hv *v, uint32_t c, uint32_t n)
{
	if (c + 3 < n) {
		uint32_t a = c + cm_hless(at(v, c + 1), at(v, c));
		uint32_t b = c + 2 + cm_hless(at(v, c + 3), at(v, c + 2));
		return cm_hless(at(v, b), at(v, a)) ? b : a;
	}
	uint32_t m = c;
	for (uint32_t j = c + 1; j < c + ARITY; j++) {
		bool take = (j < n) && cm_hless(at(v, j), at(v, m));
		m = take ? j : m;
	}
	return m;
}

static void sift_down(struct esd_cmeta *cm, const struct hv *v, uint32_t pos,
                      const struct cm_hent *e)
{
	uint32_t n = *v->n;

	for (;;) {
		uint64_t c = (uint64_t)ARITY * pos + 1;
		if (c >= n)
			break;
		uint32_t m = min_child(v, (uint32_t)c, n);
		if (!cm_hless(at(v, m), e))
			break;
		put(cm, v, pos, at(v, m));
		pos = m;
	}
	put(cm, v, pos, e);
}

/* Entry e now belongs at pos (a hole): move it up or down. */
static void resettle(struct esd_cmeta *cm, const struct hv *v, uint32_t pos,
                     const struct cm_hent *e)
{
	if (pos > 0 && cm_hless(e, at(v, (pos - 1) / ARITY)))
		sift_up(cm, v, pos, e);
	else
		sift_down(cm, v, pos, e);
}

static void heap_insert(struct esd_cmeta *cm, uint32_t slot)
{
	struct cm_hent e;
	const struct hv v = heap_of(cm, slot);

	if ((uint64_t)cm->heap_n + cm->heap_nb >= cm->capacity) /* damaged */
		return;
	esd_cm_hent_of(cm, slot, &e);
	sift_up(cm, &v, (*v.n)++, &e);
}

/* The heap a slot's entry is in, and its position there; false: none (or
 * a damaged position past its heap). */
static bool entry_of(struct esd_cmeta *cm, uint32_t slot, struct hv *v, uint32_t *pos)
{
	const uint32_t hp = cm_heappos(cm)[slot];
	if (!hp)
		return false;
	*v = hp & CM_HEAPPOS_B ? heap_b(cm) : heap_a(cm);
	*pos = (hp & ~CM_HEAPPOS_B) - 1;
	return *pos < *v->n;
}

static void heap_remove(struct esd_cmeta *cm, uint32_t slot)
{
	struct hv v;
	uint32_t pos;

	bool ok = entry_of(cm, slot, &v, &pos);
	cm_heappos(cm)[slot] = 0;
	if (!ok)
		return;
	uint32_t n = --*v.n;
	struct cm_hent last = *at(&v, n);
	/* Keep vacated entries zero so two instances stay byte-identical
	 * whatever their history. */
	*at(&v, n) = (struct cm_hent){0};
	if (pos < n)
		resettle(cm, &v, pos, &last);
}

static void heap_update(struct esd_cmeta *cm, uint32_t slot)
{
	struct hv v;
	uint32_t pos;
	struct cm_hent e;

	if (!entry_of(cm, slot, &v, &pos)) /* (past the heap: damaged) */
		return;
	if (v.tag != heap_of(cm, slot).tag) { /* Emark: OUTDATED or no more */
		heap_remove(cm, slot);
		heap_insert(cm, slot);
		return;
	}
	esd_cm_hent_of(cm, slot, &e);
	resettle(cm, &v, pos, &e);
}

/* The sibling groups below children c..c+3 (c < n) requested, in the
 * levels that miss: the walk's next compare then waits for one level's
 * lines at most, not one level after the other. The top levels stay in
 * cache and are not requested. always_inline: see cm_index_prefetch. */
#define POP_PREFETCH_FROM 64
static inline __attribute__((always_inline)) void prefetch_grandchildren(const struct hv *v,
                                                                        uint32_t c, uint32_t n)
{
	if (c < POP_PREFETCH_FROM)
		return;
	for (uint32_t j = 0; j < ARITY; j++) {
		const uint64_t g = (uint64_t)ARITY * (c + j) + 1;
		if (g >= n)
			break;
		const struct cm_hent *e = at(v, (uint32_t)g);
		__builtin_prefetch(e);
		__builtin_prefetch(e + 2 * v->st);
	}
}

/* Pop the minimum, bottom-up (Floyd): walk the hole from the root to a
 * leaf along the smallest children (no early exit to mispredict), then
 * sift the last entry up from that leaf. The last entry is usually a
 * recent, large one, so it rarely climbs. */
static uint32_t pop_from(struct esd_cmeta *cm, const struct hv *v)
{
	uint32_t n = *v->n;

	if (!n || at(v, 0)->slot >= cm->capacity) /* (the latter: damaged) */
		return ESD_SLOT_NONE;
	uint32_t slot = at(v, 0)->slot;
	cm_heappos(cm)[slot] = 0;
	*v->n = --n;
	struct cm_hent last = *at(v, n);
	*at(v, n) = (struct cm_hent){0};
	if (!n)
		return slot;
	uint32_t pos = 0;
	for (;;) {
		uint64_t c = (uint64_t)ARITY * pos + 1;
		if (c >= n)
			break;
		prefetch_grandchildren(v, (uint32_t)c, n);
		uint32_t m = min_child(v, (uint32_t)c, n);
		put(cm, v, pos, at(v, m));
		pos = m;
	}
	sift_up(cm, v, pos, &last);
	/* the next pop's slot line, read by the caller's pin check */
	if (n && at(v, 0)->slot < cm->capacity)
		__builtin_prefetch(&cm_slots(cm)[at(v, 0)->slot]);
	return slot;
}

/* Every entry of A orders before every entry of B (Emark: OUTDATED
 * first, stale entries included: an entry keeps the heap it was put in
 * with the order it had then). */
static uint32_t heap_pop(struct esd_cmeta *cm)
{
	const struct hv a = heap_a(cm), b = heap_b(cm);
	return cm->heap_n ? pop_from(cm, &a) : pop_from(cm, &b);
}

static void heapify(struct esd_cmeta *cm, const struct hv *v)
{
	/* from the last entry's parent down (none below two entries: the
	 * root of an empty heap is whatever the area held, e.g. the LRU
	 * ring's bytes, and sifting it put a slot at a position past the
	 * heap) */
	const uint32_t n = *v->n;
	for (uint32_t pos = n > 1 ? (n - 2) / ARITY + 1 : 0; pos-- > 0;) {
		struct cm_hent e = *at(v, pos);
		sift_down(cm, v, pos, &e);
	}
}

/* Every slot unparked (only those flagged are written). */
static void unpark_all(struct esd_cmeta *cm)
{
	struct esd_cmeta_slot *s = cm_slots(cm);

	for (uint32_t i = 0; i < cm->capacity; i++)
		if (s[i].parked)
			s[i].parked = 0;
	cm->nparked = 0;
}

static void heap_build(struct esd_cmeta *cm)
{
	const struct esd_cmeta_slot *s = cm_slots(cm);
	const struct hv a = heap_a(cm), b = heap_b(cm);
	uint32_t *hp = cm_heappos(cm);

	unpark_all(cm);
	for (uint32_t i = 0; i < cm->heap_n; i++)
		*at(&a, i) = (struct cm_hent){0};
	for (uint32_t i = 0; i < cm->heap_nb; i++)
		*at(&b, i) = (struct cm_hent){0};
	cm->heap_n = cm->heap_nb = 0;
	for (uint32_t i = 0; i < cm->capacity; i++) {
		hp[i] = 0;
		if (s[i].state == ESD_ROW_ABSENT || cm_pinned_now(cm, &s[i]))
			continue;
		const struct hv v = heap_of(cm, i);
		esd_cm_hent_of(cm, i, at(&v, *v.n));
		hp[i] = ++*v.n | v.tag;
	}
	heapify(cm, &a);
	heapify(cm, &b);
}

/* ---- LRU ring (see cmeta_impl.h) ----------------------------------------- */

bool esd_cm_lru_has(const struct esd_cmeta *cm, uint32_t slot)
{
	if (slot >= cm->capacity)
		return false;
	const uint32_t p = cm_slots(cm)[slot].lru_pos;
	return p >= cm->lru_head && p < cm->lru_tail && cm_lru_ring(cm)[p] == slot &&
	       cm_lru_live(cm, p);
}

/* Move the live entries to the ring's front, in order, in two passes: the
 * live entries moved down in the ring (sequential, the stale bits read a
 * word at a time), then each one's slot told its new place (random lines,
 * requested 16 ahead). Seven entries in eight are stale at steady state:
 * one pass that requested every entry's slot line took 10 ms at 262,144
 * slots, these two 5 ms. */
static void lru_compact(struct esd_cmeta *cm)
{
	struct esd_cmeta_slot *sl = cm_slots(cm);
	uint32_t *ring = cm_lru_ring(cm);
	const uint64_t *stale = cm_lru_stale(cm);
	const uint32_t tail = cm->lru_tail, cap = cm->capacity;
	uint32_t w = 0;
	for (uint32_t r = cm->lru_head, next; r < tail; r = next) {
		/* the live entries of r's bitmap word, from r to the tail */
		for (uint64_t live = esd_ring_live_word(stale, r, tail, &next); live;
		     live &= live - 1) {
			const uint32_t s = ring[r / 64 * 64 + (uint32_t)__builtin_ctzll(live)];
			ring[w] = s;
			w += s < cap; /* (past the capacity: a damaged block's, dropped) */
		}
	}
	for (uint32_t i = 0; i < w; i++) {
		if (i + 16 < w)
			__builtin_prefetch(&sl[ring[i + 16]], 1);
		sl[ring[i]].lru_pos = i;
	}
	esd_ring_clear(cm_lru_stale(cm), 0, tail);
	cm->lru_head = 0;
	cm->lru_tail = w;
	cm->heap_n = w;
}

uint32_t esd_cmeta_lru_room(const struct esd_cmeta *cm)
{
	if (!cm || cm->policy != ESD_POLICY_LRU || !cm_counters_ok(cm))
		return UINT32_MAX;
	return cm_lru_size_of(cm->capacity) - cm->lru_tail;
}

int esd_cmeta_lru_compact(struct esd_cmeta *cm)
{
	if (!cm)
		return -EINVAL;
	if (!cm_counters_ok(cm))
		return -EUCLEAN;
	if (cm->policy == ESD_POLICY_LRU)
		lru_compact(cm);
	return 0;
}

uint32_t esd_cm_lru_reserve(struct esd_cmeta *cm, uint32_t n)
{
	if (n > cm_lru_size_of(cm->capacity) - cm->lru_tail)
		lru_compact(cm);
	return cm->lru_tail;
}

void esd_cm_lru_commit(struct esd_cmeta *cm, uint32_t n)
{
	esd_ring_clear(cm_lru_stale(cm), cm->lru_tail, cm->lru_tail + n);
	cm->lru_tail += n;
	cm->heap_n += n;
}

void esd_cm_lru_append_group(struct esd_cmeta *cm, const uint32_t *slots, uint32_t n)
{
	const uint32_t t = esd_cm_lru_reserve(cm, n);
	struct esd_cmeta_slot *sl = cm_slots(cm);
	uint32_t *ring = cm_lru_ring(cm);
	for (uint32_t i = 0; i < n; i++) {
		ring[t + i] = slots[i];
		sl[slots[i]].lru_pos = t + i;
	}
	esd_cm_lru_commit(cm, n);
}

static void lru_clear(struct esd_cmeta *cm)
{
	esd_ring_clear(cm_lru_stale(cm), 0, cm->lru_tail);
	cm->lru_head = cm->lru_tail = 0;
	cm->heap_n = cm->heap_nb = 0;
}

static int cmp_lru(const void *x, const void *y)
{
	const struct cm_hent *a = x, *b = y;
	return cm_hless(a, b) ? -1 : cm_hless(b, a) ? 1 : 0;
}

/* The ring in (last_use, key) order, every occupied slot, sorted once with
 * the heap's area as scratch: only on a switch to LRU. The ring's 4-byte
 * entry i overwrites bytes the sort's 32-byte entries before i held. */
static void lru_build(struct esd_cmeta *cm)
{
	const struct esd_cmeta_slot *s = cm_slots(cm);
	struct cm_hent *h = cm_heap(cm);
	uint32_t n = 0;

	lru_clear(cm);
	unpark_all(cm);
	for (uint32_t i = 0; i < cm->capacity; i++) {
		cm_heappos(cm)[i] = 0;
		if (s[i].state != ESD_ROW_ABSENT)
			esd_cm_hent_of(cm, i, &h[n++]);
	}
	qsort(h, n, sizeof(*h), cmp_lru);
	uint32_t *ring = cm_lru_ring(cm);
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t slot = h[i].slot;
		ring[i] = slot;
		cm_slots(cm)[slot].lru_pos = i;
	}
	esd_ring_clear(cm_lru_stale(cm), 0, n);
	cm->lru_tail = n;
	cm->heap_n = n;
}

/* ---- the victim order, whichever structure holds it ------------------------ */

static inline bool is_lru(const struct esd_cmeta *cm)
{
	return cm->policy == ESD_POLICY_LRU;
}

void esd_cm_heap_insert(struct esd_cmeta *cm, uint32_t slot)
{
	if (is_lru(cm))
		esd_cm_lru_append_group(cm, &slot, 1);
	else
		heap_insert(cm, slot);
}

void esd_cm_heap_remove(struct esd_cmeta *cm, uint32_t slot)
{
	if (is_lru(cm)) {
		if (esd_cm_lru_has(cm, slot))
			cm_lru_drop(cm, slot);
	} else if (cm_heappos(cm)[slot]) {
		heap_remove(cm, slot);
	}
}

/* Under LRU the only order change there is, is a use: the slot becomes
 * the newest, i.e. goes to the tail. */
void esd_cm_heap_update(struct esd_cmeta *cm, uint32_t slot)
{
	if (is_lru(cm)) {
		if (!esd_cm_lru_has(cm, slot))
			return;
		cm_lru_drop(cm, slot);
		esd_cm_lru_append_group(cm, &slot, 1);
	} else if (cm_heappos(cm)[slot]) {
		heap_update(cm, slot);
	}
}

/* Under LRU: the oldest live entry, skipping stale ones; slots pinned in
 * this iteration have no live entry (begin_iter dropped it). */
uint32_t esd_cm_heap_pop(struct esd_cmeta *cm)
{
	if (!is_lru(cm))
		return heap_pop(cm);
	const uint32_t *ring = cm_lru_ring(cm);
	uint32_t p;
	while ((p = esd_ring_pop(cm_lru_stale(cm), &cm->lru_head, cm->lru_tail)) != ESD_RING_NONE)
		/* (an entry past the capacity only in a damaged block: skipped) */
		if (ring[p] < cm->capacity) {
			cm->heap_n--;
			return ring[p];
		}
	return ESD_SLOT_NONE;
}

void esd_cm_emark_settle(struct esd_cmeta *cm, uint32_t slot)
{
	struct esd_cmeta_slot *s = &cm_slots(cm)[slot];

	if (cm_emark_last(cm, s)) {
		if (!s->parked) {
			s->parked = 1;
			cm->nparked++;
		}
		return;
	}
	esd_cm_emark_reorder(cm, slot);
}

void esd_cm_emark_reorder(struct esd_cmeta *cm, uint32_t slot)
{
	struct esd_cmeta_slot *s = &cm_slots(cm)[slot];

	if (s->parked) {
		s->parked = 0;
		cm->nparked--;
	}
	if (cm_heappos(cm)[slot])
		heap_update(cm, slot);
	else
		heap_insert(cm, slot);
}

void esd_cm_heap_build(struct esd_cmeta *cm)
{
	if (is_lru(cm)) {
		lru_build(cm);
	} else {
		lru_clear(cm);
		heap_build(cm);
	}
}

void esd_cm_free_set(struct esd_cmeta *cm, uint32_t slot)
{
	uint64_t idx = slot;

	for (int l = 0; l < CM_FREE_LEVELS; l++) {
		uint64_t *w = &cm_free(cm, l)[idx / 64];
		bool was_empty = *w == 0;
		*w |= UINT64_C(1) << (idx % 64);
		if (!was_empty)
			break;
		idx /= 64;
	}
}

void esd_cm_free_clear(struct esd_cmeta *cm, uint32_t slot)
{
	uint64_t idx = slot;

	for (int l = 0; l < CM_FREE_LEVELS; l++) {
		uint64_t *w = &cm_free(cm, l)[idx / 64];
		*w &= ~(UINT64_C(1) << (idx % 64));
		if (*w)
			break;
		idx /= 64;
	}
}

bool esd_cm_free_test(const struct esd_cmeta *cm, uint32_t slot)
{
	return (cm_free(cm, 0)[slot / 64] >> (slot % 64)) & 1;
}

uint32_t esd_cm_free_first(const struct esd_cmeta *cm)
{
	const uint64_t *top = cm_free(cm, CM_FREE_LEVELS - 1);
	uint64_t idx = 0;
	uint32_t w;

	for (w = 0; w < cm->free_words[CM_FREE_LEVELS - 1]; w++)
		if (top[w])
			break;
	if (w == cm->free_words[CM_FREE_LEVELS - 1])
		return ESD_SLOT_NONE;
	idx = (uint64_t)w * 64 + (uint64_t)__builtin_ctzll(top[w]);
	for (int l = CM_FREE_LEVELS - 2; l >= 0; l--)
		idx = idx * 64 + (uint64_t)__builtin_ctzll(cm_free(cm, l)[idx]);
	return (uint32_t)idx;
}
