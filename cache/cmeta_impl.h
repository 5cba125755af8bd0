/*
 * cmeta_impl.h - layout of the esd_cmeta block (private to cache/).
 *
 * One contiguous block, every part at a 64-byte aligned offset from the
 * block's start, so the block means the same at any address and in any
 * process, and memcpy makes a valid copy:
 *
 *   header     struct esd_cmeta (256 bytes)
 *   slots      capacity x struct esd_cmeta_slot (64 bytes each)
 *   index      index_size x struct cm_ient (about 2 x capacity): open
 *              addressing, linear probing, backward-shift deletion (no
 *              tombstones)
 *   heap       about capacity+6 x struct cm_hent: indexed 4-ary min-heaps,
 *              laid out so the four children of a node fill two cache
 *              lines; they hold every occupied slot that is not pinned
 *              (nor parked, below), keyed by the policy's victim order,
 *              and may hold pinned ones with stale keys (victim
 *              selection skips them). Heap A grows from the area's
 *              front; under Emark heap B, the rows that are not
 *              OUTDATED, from its back (cm_heap_b)
 *   heappos    capacity x uint32: heap position + 1 of a slot, 0 = out,
 *              bit 31 set for heap B
 *   pinned     capacity x uint32: the pins of the last begin_iter whose
 *              lapse has work (under Emark those not parked; below)
 *   hints      capacity x uint64: sorted keys of the last lookahead call
 *   free       three-level bitmap of free slots (bit set = free), so the
 *              lowest free slot is found in three word scans
 *   lrustale   one bit per entry of the LRU ring (LRU policy only)
 *
 * Pinned rows cannot be chosen: a pop that yields a pinned slot sets it
 * aside and pops again (the set-aside slots go back after the
 * evictions); when the pin lapses the slot's heap entry is brought up to
 * date, so every unpinned slot is always in the heap at its exact place.
 * So a state change of a pinned slot (Emark orders OUTDATED rows first)
 * leaves its entry as it is too: the lapse brings it up to date.
 *
 * Emark parks rows: a row in the last class of Emark's order (not
 * OUTDATED, mark at the target: no victim is taken there while any row
 * with an older mark or an OUTDATED copy is unpinned) is only flagged
 * (slot.parked, counted in the header), its heap entry left as it is or
 * absent. A pin is parked when it is pinned (its line is at hand then)
 * unless it is OUTDATED, and pinned[] lists only the pins not parked, so
 * the lapse of a parked pin reads nothing; a parked pin that turns
 * OUTDATED is unparked and appended to pinned[] (so every pin not parked
 * is listed, once). A listed pin that lapses into the last class is
 * parked then. Most pins are parked, and they cost no sift. A pop that
 * yields a parked slot drops its entry; a parked row that becomes OUTDATED
 * gets its exact entry back. When a pop yields an unparked row of that
 * last class while rows are parked, or the target moves on (every row then
 * leaves that class), the heap is rebuilt with every unpinned row at its
 * exact place and nothing parked. So every unpinned slot that is not
 * parked is in the heap at its exact place.
 *
 * Under LRU the victim order is (last_use, key): the order in which the
 * iterations used the slots, each iteration's slots in key order. It is
 * kept as a ring of slot numbers in the heap's area (8 entries per slot
 * of capacity), appended to at the end of each begin_iter with that
 * iteration's needed slots in key order. Each slot records its entry's
 * place (slot.lru_pos); an entry goes stale, by one bit in 'lrustale',
 * when its slot is used again or freed. So a use costs one bit and one
 * append, with no list links to chase through memory; pops skip stale
 * entries, and when the ring's end is reached the live entries (at most
 * one per occupied slot) are moved to its front (compaction: once per
 * ~7 x capacity appends).
 */
#ifndef ESD_CACHE_CMETA_IMPL_H
#define ESD_CACHE_CMETA_IMPL_H

#include <esd/policy.h>
#include "policy_rules.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CM_MAGIC       UINT64_C(0x4154454d43445345) /* "ESDCMETA" */
#define CM_VERSION     5u /* 2: index at 2 x capacity; 3: LRU ring; 4: Emark's parked rows; \
                           * 5: pins parked at their pin, pinned[] the pins not parked */
#define CM_MAX_CAP     (UINT32_C(1) << 30)
#define CM_HDR_BYTES   256u
#define CM_FREE_LEVELS 3

struct esd_cmeta {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;
	uint64_t total_bytes;
	uint32_t capacity;
	uint32_t policy;     /* enum esd_policy */
	uint32_t index_size; /* index entries: capacity * 1.5, rounded up to 4 */
	uint32_t count;      /* occupied slots */
	uint32_t heap_n;     /* entries in the heap */
	uint32_t npinned;    /* entries of pinned[] */
	uint32_t nhints;     /* entries of hints[] */
	uint32_t emark_target;
	uint32_t emark_at_target; /* occupied slots whose mark == emark_target */
	uint32_t free_words[CM_FREE_LEVELS];
	uint64_t last_iter; /* iteration of the last begin_iter (0: none yet) */
	uint64_t hint_iter; /* iteration of the last lookahead call */
	uint64_t off_slots, off_index, off_heap, off_heappos, off_pinned, off_hints;
	uint64_t off_free[CM_FREE_LEVELS];
	uint64_t off_lrustale;       /* LRU ring's stale bits */
	uint32_t lru_head, lru_tail; /* LRU ring: entries [head, tail) */
	uint32_t nparked;            /* Emark: slots with slot.parked set */
	uint32_t heap_nb;            /* entries in heap B (Emark only) */
	uint8_t reserved[CM_HDR_BYTES - 184];
};
_Static_assert(sizeof(struct esd_cmeta) == CM_HDR_BYTES, "cmeta header size");
_Static_assert(sizeof(struct esd_cmeta_slot) == 64, "cmeta slot is one cache line");

struct cm_ient {
	uint64_t key;
	uint32_t slot; /* ESD_SLOT_NONE: empty */
	uint32_t hash; /* low 32 bits of cm_hash(key): the home bucket, kept
	                * so deletion's backward shift needs no rehash */
};

/* Heap entry: the policy's order as (a, b, c) compared lexicographically,
 * c being the key, so ties are impossible and the order is total. */
struct cm_hent {
	uint64_t a, b, c;
	uint32_t slot;
	uint32_t pad;
};
_Static_assert(sizeof(struct cm_hent) == 32, "two heap entries per cache line");

#define CM_AT(cm, off, type) ((type *)((char *)(cm) + (cm)->off))

static inline struct esd_cmeta_slot *cm_slots(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_slots, struct esd_cmeta_slot);
}
static inline struct cm_ient *cm_index(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_index, struct cm_ient);
}
/* Heap A's position p (0 = the root) is entry p of this array; the array
 * starts CM_HEAP_SKEW entries into its 128-byte aligned area. */
#define CM_HEAP_SKEW 3
static inline struct cm_hent *cm_heap(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_heap, struct cm_hent) + CM_HEAP_SKEW;
}
/* Heap B's root: the area's entry cm_heap_b_root(capacity), its position
 * p the entry p before it, so its sibling groups fill 128 bytes too; the
 * two heaps hold at most capacity entries together and never meet. The
 * area has cm_heap_b_root(capacity) + 1 entries. */
#define CM_HEAPPOS_B (UINT32_C(1) << 31)
static inline uint64_t cm_heap_b_root(uint32_t capacity)
{
	return ((uint64_t)capacity + CM_HEAP_SKEW - 1 + 3) & ~(uint64_t)3;
}
static inline struct cm_hent *cm_heap_b(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_heap, struct cm_hent) + cm_heap_b_root(cm->capacity);
}
/* The entry a heap position names (heappos's value, not 0). */
static inline struct cm_hent *cm_heap_entry(const struct esd_cmeta *cm, uint32_t hp)
{
	return hp & CM_HEAPPOS_B ? cm_heap_b(cm) - ((hp & ~CM_HEAPPOS_B) - 1)
	                         : cm_heap(cm) + (hp - 1);
}
static inline uint32_t *cm_heappos(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_heappos, uint32_t);
}
/* The lines an update or removal of the entry at heap position hp
 * (heappos's value, 0: none) reads first: the entry, its parent (which
 * way it moves) and its children's group. A removal leaves a hole
 * anywhere in the heap, and at 2^18 slots those lines are DRAM misses
 * that a loop over many slots can overlap. always_inline: see
 * cm_index_prefetch. */
static inline __attribute__((always_inline)) void cm_heap_prefetch(const struct esd_cmeta *cm,
                                                                   uint32_t hp)
{
	if (!hp)
		return;
	const uint32_t tag = hp & CM_HEAPPOS_B, p = (hp & ~CM_HEAPPOS_B) - 1;
	const struct cm_hent *e = cm_heap_entry(cm, hp);
	__builtin_prefetch(e, 1);
	if (p)
		__builtin_prefetch(cm_heap_entry(cm, ((p - 1) / 4 + 1) | tag));
	if ((uint64_t)4 * p + 1 < (tag ? cm->heap_nb : cm->heap_n)) {
		const struct cm_hent *c = cm_heap_entry(cm, (4 * p + 2) | tag);
		__builtin_prefetch(c);
		__builtin_prefetch(tag ? c - 2 : c + 2);
	}
}
/* The LRU ring (LRU policy only; its rules: policy_rules.h) shares
 * the heap's area: 8 four-byte entries per slot of capacity. */
static inline uint32_t *cm_lru_ring(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_heap, uint32_t);
}
static inline uint32_t cm_lru_size_of(uint32_t capacity)
{
	const uint64_t n =
	    ((uint64_t)capacity + CM_HEAP_SKEW) * sizeof(struct cm_hent) / sizeof(uint32_t);
	return n > UINT32_MAX - 63 ? (UINT32_MAX - 63) & ~UINT32_C(63) : (uint32_t)n;
}

/* The header's counters within their arrays (esd_cmeta_attach checks
 * them; begin_iter again, since a shared block can be damaged later). */
static inline bool cm_counters_ok(const struct esd_cmeta *cm)
{
	return cm->count <= cm->capacity && (uint64_t)cm->heap_n + cm->heap_nb <= cm->capacity &&
	       cm->npinned <= cm->capacity && cm->nhints <= cm->capacity &&
	       cm->nparked <= cm->capacity && cm->policy <= ESD_POLICY_LOOKAHEAD &&
	       cm->lru_head <= cm->lru_tail && cm->lru_tail <= cm_lru_size_of(cm->capacity);
}
static inline uint64_t *cm_lru_stale(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_lrustale, uint64_t);
}
static inline uint32_t *cm_pinned(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_pinned, uint32_t);
}
static inline uint64_t *cm_hints(const struct esd_cmeta *cm)
{
	return CM_AT(cm, off_hints, uint64_t);
}
static inline uint64_t *cm_free(const struct esd_cmeta *cm, int level)
{
	return (uint64_t *)((char *)cm + cm->off_free[level]);
}

static inline bool cm_pinned_now(const struct esd_cmeta *cm, const struct esd_cmeta_slot *s)
{
	return cm->last_iter != 0 && s->pin_iter == cm->last_iter;
}

/* Does the slot's entry belong in heap B (Emark, not OUTDATED)? */
static inline bool cm_heap_b_holds(const struct esd_cmeta *cm, const struct esd_cmeta_slot *s)
{
	return cm->policy == ESD_POLICY_EMARK && s->state != ESD_ROW_OUTDATED;
}

/* Emark: is the row in the last class of the order (not OUTDATED, mark at
 * the target), where it may be parked? */
static inline bool cm_emark_last(const struct esd_cmeta *cm, const struct esd_cmeta_slot *s)
{
	return s->state != ESD_ROW_OUTDATED && s->mark == cm->emark_target;
}

/* Slot fields that readers in other processes look at (key, state, clock)
 * are stored with relaxed atomics: no tearing, no ordering (the region's
 * iteration sequence word orders them, see docs/shm-layout.md). */
static inline void cm_store64(uint64_t *p, uint64_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void cm_store8(uint8_t *p, uint8_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* index.c */
static inline uint64_t cm_hash(uint64_t key)
{
	/* murmur3's 64-bit finaliser: every key bit reaches the low bits. */
	key ^= key >> 33;
	key *= UINT64_C(0xff51afd7ed558ccd);
	key ^= key >> 33;
	key *= UINT64_C(0xc4ceb9fe1a85ec53);
	key ^= key >> 33;
	return key;
}
/* Home bucket of a hash: multiply-shift range reduction, so the table
 * needs no power-of-two size (load stays near 1/2 instead of 1/4..1/2). */
static inline uint32_t cm_home(uint32_t hash, uint32_t size)
{
	return (uint32_t)(((uint64_t)hash * size) >> 32);
}
/* always_inline: a prefetch has no side effects, so GCC treats a helper
 * holding only one as const and drops calls to it (void result) unless it
 * is inlined first. */
static inline __attribute__((always_inline)) void cm_index_prefetch(const struct esd_cmeta *cm,
                                                                    uint64_t key)
{
	__builtin_prefetch((const char *)cm + cm->off_index +
	                   (size_t)cm_home((uint32_t)cm_hash(key), cm->index_size) * 16u);
}
void esd_cm_index_insert(struct esd_cmeta *cm, uint64_t key, uint32_t slot);
void esd_cm_index_remove(struct esd_cmeta *cm, uint64_t key);

/* heap.c: victim heap and free-slot bitmap */
void esd_cm_heap_insert(struct esd_cmeta *cm, uint32_t slot);
void esd_cm_heap_remove(struct esd_cmeta *cm, uint32_t slot);
void esd_cm_heap_update(struct esd_cmeta *cm, uint32_t slot);
uint32_t esd_cm_heap_pop(struct esd_cmeta *cm);
void esd_cm_heap_build(struct esd_cmeta *cm);
/* Emark: park the unpinned slot (it is in the last class), or bring its
 * entry up to date (inserting it if it has none) when it is not. */
void esd_cm_emark_settle(struct esd_cmeta *cm, uint32_t slot);
/* Emark: an unpinned slot's order changed: unpark it if parked, and give
 * it its exact entry. */
void esd_cm_emark_reorder(struct esd_cmeta *cm, uint32_t slot);
void esd_cm_hent_of(const struct esd_cmeta *cm, uint32_t slot, struct cm_hent *e);
/* LRU: is ring entry p live? */
static inline bool cm_lru_live(const struct esd_cmeta *cm, uint32_t p)
{
	return esd_ring_live(cm_lru_stale(cm), p);
}
/* LRU: slot's entry goes stale (it is used again or freed). */
static inline void cm_lru_drop(struct esd_cmeta *cm, uint32_t slot)
{
	const uint32_t p = cm_slots(cm)[slot].lru_pos;
	if (p >= cm->lru_tail)
		return; /* not in the ring (a damaged block: never index past it) */
	esd_ring_drop(cm_lru_stale(cm), p);
	cm->heap_n--;
}
/* LRU: append slots[0..n) (in this order) as the newest entries. */
void esd_cm_lru_append_group(struct esd_cmeta *cm, const uint32_t *slots, uint32_t n);
/* LRU, the same in two halves: room for n entries at [tail, tail + n)
 * (compacting first if need be; returns tail), which the caller writes
 * (ring entry and slot lru_pos) while nothing pops; then commit them. */
uint32_t esd_cm_lru_reserve(struct esd_cmeta *cm, uint32_t n);
void esd_cm_lru_commit(struct esd_cmeta *cm, uint32_t n);
/* LRU: is slot's recorded entry live (the slot is in the order)? */
bool esd_cm_lru_has(const struct esd_cmeta *cm, uint32_t slot);
static inline bool cm_hless(const struct cm_hent *x, const struct cm_hent *y)
{
	/* Branch-free: which child is smaller is a coin toss the predictor
	 * cannot learn, so compare with flags, not jumps. */
	unsigned __int128 xa = ((unsigned __int128)x->a << 64) | x->b;
	unsigned __int128 ya = ((unsigned __int128)y->a << 64) | y->b;
	return (xa < ya) | ((xa == ya) & (x->c < y->c));
}

void esd_cm_free_set(struct esd_cmeta *cm, uint32_t slot);
void esd_cm_free_clear(struct esd_cmeta *cm, uint32_t slot);
/* Lowest free slot, or ESD_SLOT_NONE. */
uint32_t esd_cm_free_first(const struct esd_cmeta *cm);
bool esd_cm_free_test(const struct esd_cmeta *cm, uint32_t slot);

#endif /* ESD_CACHE_CMETA_IMPL_H */
