/*
 * esd/policy.h - cache metadata and eviction policies: the one module that
 * both the real cache (cache/, in shared memory) and the dispatcher's
 * snapshots (dispatch/, private memory) use, so the two cannot diverge.
 *
 * Model
 * -----
 * A struct esd_cmeta is the metadata of one worker's cache: 'capacity'
 * slots, each holding at most one row key with its state (esd/types.h),
 * clock and policy bookkeeping, plus an index key -> slot. It is one
 * contiguous, position-independent block (offsets and indices, never
 * pointers), so it can live in a huge-page region shared with trainers or
 * in a malloc'd buffer, and be copied with memcpy (esd_cmeta_copy).
 *
 * The row data (vectors, optimizer state, gradients) is not here: slot i of
 * the metadata describes row slot i of the cache region.
 *
 * Determinism
 * -----------
 * Every mutation is a function of the metadata and the arguments only (no
 * time, no randomness, no addresses), so two instances given the same calls
 * in the same order are byte-identical. The victim of an eviction is the
 * unpinned, occupied slot that is smallest in the policy's order:
 *
 *   LRU        (last_use asc, key asc)
 *   LFU        (freq asc, last_use asc, key asc)
 *   EMARK      (OUTDATED first, mark asc, freq asc, key asc)     ESD §8.1
 *   LOOKAHEAD  (next_use desc, last_use asc, key asc)
 *
 * last_use is the iteration of the last access; freq counts accesses
 * (iterations in which the key was needed); mark is Emark's target at the
 * last access (target starts at 1 and is incremented when an insert finds
 * the cache full and every occupied slot's mark equals target); next_use is
 * the next iteration known to need the key (UINT64_MAX: not known).
 *
 * One iteration
 * -------------
 *   esd_cmeta_lookahead()   (optional) next-use hints from the next batch
 *   esd_cmeta_begin_iter()  the keys this worker needs in iteration t:
 *                           pins them, touches hits, picks slots for
 *                           misses (evicting), reports pulls and evictions
 *   esd_cmeta_set_state()   after pulls/pushes/training: new states, clocks
 *   esd_cmeta_mark_outdated() rows another worker updated
 * Rows pinned for iteration t are never evicted during t; pins lapse when
 * the next esd_cmeta_begin_iter() starts a later iteration.
 *
 * Concurrency: one writer (the daemon, or the dispatcher for a snapshot).
 * Readers in other processes read slot fields with relaxed atomics and
 * must not rely on the index while the writer runs.
 */
#ifndef ESD_POLICY_H
#define ESD_POLICY_H

#include <stddef.h>
#include <stdint.h>
#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum esd_policy {
	ESD_POLICY_LRU = 0,
	ESD_POLICY_LFU = 1,
	ESD_POLICY_EMARK = 2,
	ESD_POLICY_LOOKAHEAD = 3,
};

/* "lru", "lfu", "emark", "lookahead". Returns 0 or -EINVAL. */
int esd_policy_parse(const char *name, enum esd_policy *out);
const char *esd_policy_name(enum esd_policy policy);

#define ESD_NEXT_USE_NONE UINT64_MAX
#define ESD_SLOT_NONE     UINT32_MAX

/* One slot, as readers see it. 64 bytes (one cache line). Written only by
 * the metadata's single writer. */
struct esd_cmeta_slot {
	uint64_t key;      /* valid when state != ESD_ROW_ABSENT */
	uint64_t clock;    /* version of the value held (the PS's row clock) */
	uint64_t last_use; /* iteration of the last access */
	uint64_t next_use; /* lookahead hint, ESD_NEXT_USE_NONE if unknown */
	uint64_t pin_iter; /* pinned during iteration pin_iter (0: never) */
	uint32_t freq;     /* accesses (iterations that needed the key) */
	uint32_t mark;     /* Emark target at the last access */
	uint8_t state;     /* enum esd_row_state */
	uint8_t parked;    /* the cache's own bookkeeping: Emark keeps this
	                    * row out of its victim order for now (a clean row
	                    * at the target, the last rows it would evict) */
	uint8_t reserved[2];
	uint32_t lru_pos; /* the cache's own bookkeeping: the slot's place in
	                   * the LRU order (LRU policy only) */
	uint64_t reserved2;
};

struct esd_cmeta;

/* A pull the caller must perform: row 'key' into 'slot'. 'outdated' is 1
 * when the slot already held an older version of the key. */
struct esd_cmeta_pull {
	uint64_t key;
	uint32_t slot;
	uint32_t outdated;
};

/* A row evicted to make room: 'slot' is reused by a pull of this
 * iteration. When 'dirty' is 1 the caller must evict-push the row's value
 * (still in the slot's row data) before pulling into the slot. */
struct esd_cmeta_evict {
	uint64_t key;
	uint64_t clock;
	uint32_t slot;
	uint32_t dirty;
};

/* Result of esd_cmeta_begin_iter(). Arrays are provided by the caller,
 * each with room for n (the number of needed keys) entries. */
struct esd_cmeta_fill {
	struct esd_cmeta_pull *pulls; /* in key order */
	struct esd_cmeta_evict *evicts;
	uint32_t *slots; /* slot of each needed key, in input order */
	size_t n_pulls, n_evicts;
	size_t n_hits; /* needed keys already latest (CLEAN/DIRTY) */
	size_t n_miss_absent, n_miss_outdated;
	size_t n_evict_clean, n_evict_dirty;
};

/* Bytes an esd_cmeta of 'capacity' slots occupies (header, slots, index,
 * policy structures). */
size_t esd_cmeta_bytes(uint32_t capacity);

/* Format 'mem' (at least esd_cmeta_bytes(capacity) bytes, 64-byte
 * aligned) as an empty cache. About 145 bytes per slot (slot record 64,
 * index 32 at load 1/2, victim heap or LRU ring 32, pins 4, heap positions
 * 4, hints 8, the LRU ring's stale bits 1, free bitmap).
 * Returns 0, -EINVAL (capacity 0 or above 2^30, len too small,
 * misaligned, unknown policy). esd_cmeta_bytes returns 0 for a capacity
 * it cannot format. */
int esd_cmeta_init(void *mem, size_t len, uint32_t capacity, enum esd_policy policy,
                   struct esd_cmeta **out);

/* Validate a formatted block (magic, version, sizes) without changing it,
 * e.g. after mapping a region. Returns 0, -ESD_EBADMAGIC, -ESD_EBADVERSION
 * or -EINVAL (sizes inconsistent with len). */
int esd_cmeta_attach(void *mem, size_t len, struct esd_cmeta **out);

/* Copy src into dst (dst must have room: esd_cmeta_bytes of src's
 * capacity). Used to take a snapshot of a cache. Returns 0 or -EINVAL. */
int esd_cmeta_copy(void *dst, size_t len, const struct esd_cmeta *src, struct esd_cmeta **out);

/* Bytes of this block (esd_cmeta_bytes of its capacity); 0 for NULL. */
size_t esd_cmeta_block_bytes(const struct esd_cmeta *cm);

/* Full consistency check, O(capacity): index, victim heap, free slots,
 * pins and counters agree with the slots. For tests and debugging tools
 * (esdctl); logs the first inconsistency. Returns 0 or -EINVAL. */
int esd_cmeta_verify(const struct esd_cmeta *cm);

uint32_t esd_cmeta_capacity(const struct esd_cmeta *cm);
uint32_t esd_cmeta_count(const struct esd_cmeta *cm); /* occupied slots */
enum esd_policy esd_cmeta_policy(const struct esd_cmeta *cm);
/* Iteration of the last esd_cmeta_begin_iter (0 before the first). */
uint64_t esd_cmeta_last_iter(const struct esd_cmeta *cm);
/* Emark's current target (starts at 1). */
uint32_t esd_cmeta_emark_target(const struct esd_cmeta *cm);
/* The policy can change between iterations (esdctl set policy): O(C) to
 * reorder the victims. Marks, frequencies and hints are kept for every
 * policy, so a switch takes effect with full history. Returns 0,
 * -EINVAL (unknown policy) or -EUCLEAN (the header's counters are out of
 * range: a damaged block, left as it is). */
int esd_cmeta_set_policy(struct esd_cmeta *cm, enum esd_policy policy);

/* LRU keeps its order as a ring of slot numbers: a slot used again leaves
 * a stale entry behind, and when the ring has no room for an iteration's
 * keys, begin_iter compacts it first, O(capacity) with a write to every
 * occupied slot (about 5 ms at 262,144 slots). esd_cmeta_lru_room is the
 * number of keys that still fit (UINT32_MAX under the other policies);
 * esd_cmeta_lru_compact compacts now, so that a caller with several blocks
 * (the dispatcher's snapshots, which tend to come due in one iteration)
 * can spread their compactions. Neither changes the order or any result.
 * compact returns 0, -EINVAL (NULL) or -EUCLEAN (a damaged block, left as
 * it is). */
uint32_t esd_cmeta_lru_room(const struct esd_cmeta *cm);
int esd_cmeta_lru_compact(struct esd_cmeta *cm);
/* The occupied slots in LRU victim order, oldest first (at most cap of
 * them; returns how many). 0 under the other policies. */
size_t esd_cmeta_lru_order(const struct esd_cmeta *cm, uint32_t *slots, size_t cap);
/* Keys holding a lookahead hint (the last esd_cmeta_lookahead's set). */
uint32_t esd_cmeta_hinted(const struct esd_cmeta *cm);

/* One row of a block made by esd_cmeta_from_rows. */
struct esd_cmeta_row {
	uint64_t key;
	uint64_t clock;
	uint64_t last_use; /* 1..iter; the rows with last_use == iter are the
	                    * last iteration's, pinned */
	uint32_t freq;     /* >= 1 */
	uint32_t mark;     /* 1..emark_target */
	uint8_t state;     /* OUTDATED, CLEAN or DIRTY */
};

/* Format 'mem' (as esd_cmeta_init) as a block holding rows[0..n) in slots
 * 0..n-1, as it stands after iteration 'iter' (esd_cmeta_last_iter), with
 * Emark's target 'emark_target' and no lookahead hints: the block a cache
 * would have after the iterations that gave its rows these fields (every
 * victim order follows from them; slot numbers aside). Returns 0,
 * or -EINVAL for a bad argument or row (logged with its index; mem's
 * contents are then undefined). */
int esd_cmeta_from_rows(void *mem, size_t len, uint32_t capacity, enum esd_policy policy,
                        const struct esd_cmeta_row *rows, size_t n, uint64_t iter,
                        uint32_t emark_target, struct esd_cmeta **out);

/* Slot of key, or ESD_SLOT_NONE. No allocation, no locks. */
uint32_t esd_cmeta_find(const struct esd_cmeta *cm, esd_key_t key);
/* Batched find with prefetching: slots[i] = esd_cmeta_find(keys[i]). */
void esd_cmeta_find_batch(const struct esd_cmeta *cm, const esd_key_t *keys, size_t n,
                          uint32_t *slots);
/* State of key in this cache (ESD_ROW_ABSENT when not cached). */
enum esd_row_state esd_cmeta_state(const struct esd_cmeta *cm, esd_key_t key);
const struct esd_cmeta_slot *esd_cmeta_slot(const struct esd_cmeta *cm, uint32_t slot);

/* Lookahead hints: every cached key in 'keys' (any order, duplicates
 * allowed) gets next_use = iter, every other cached key ESD_NEXT_USE_NONE;
 * keys inserted later take their hint from the most recent call (the block
 * keeps a sorted copy of at most 'capacity' keys). O(n log n).
 * Returns 0, -EINVAL (NULL keys with n > 0), -ENOMEM (n > capacity; the
 * previous hints stay) or -EUCLEAN (a damaged block, as for set_policy). */
int esd_cmeta_lookahead(struct esd_cmeta *cm, const esd_key_t *keys, size_t n, uint64_t iter);

/* Start iteration 'iter' (>= 1, strictly greater than the previous one) with the
 * n keys this worker needs, sorted ascending without duplicates. Pins all
 * of them, touches the ones present, then assigns slots to the absent ones
 * in key order (free slots first, lowest index first; then victims in
 * policy order) and reports pulls and evictions in 'fill'. So the present
 * keys take Emark's target as it stands at the call; the target moves on
 * (a full cache, every row at it) only at an absent key. Newly inserted
 * keys are OUTDATED until the caller sets them CLEAN after the pull.
 * Returns 0, -EINVAL (unsorted or duplicate keys, iter not increasing) or
 * -ENOSPC (n > capacity); on those errors nothing changes. -EUCLEAN: the
 * block is damaged (esd_cmeta_verify says what is wrong): either the
 * header's counters are out of range (nothing changes) or there is no
 * victim where the counts promise one (begin_iter stops there, part
 * done). A damaged block is not to be used again; whatever its contents,
 * no call indexes past it (slot numbers read from its index, heap, ring
 * or pins are checked against the capacity first). */
int esd_cmeta_begin_iter(struct esd_cmeta *cm, uint64_t iter, const esd_key_t *keys, size_t n,
                         struct esd_cmeta_fill *fill);
/* esd_cmeta_begin_iter, then each needed key's slot takes states[i]
 * (ESD_ROW_OUTDATED, CLEAN or DIRTY) at clock 0, in the same pass: the
 * same as esd_cmeta_set_states(cm, fill->slots, states, 0, 0, n) after
 * it, for a caller that knows the iteration's outcome in advance (the
 * dispatcher's snapshots). 'fill' reports the states before. Returns as
 * esd_cmeta_begin_iter, -EINVAL too for a state outside those three. */
int esd_cmeta_begin_iter_states(struct esd_cmeta *cm, uint64_t iter, const esd_key_t *keys,
                                size_t n, const uint8_t *states, struct esd_cmeta_fill *fill);

/* Set the state and clock of an occupied slot (ESD_ROW_ABSENT frees it).
 * The victim order of a slot pinned by the current iteration is brought up
 * to date when its pin lapses (as after a touch), not here.
 * Returns 0 or -EINVAL. */
int esd_cmeta_set_state(struct esd_cmeta *cm, uint32_t slot, enum esd_row_state state,
                        uint64_t clock);
/* The same as esd_cmeta_set_state(cm, slots[q], states ? states[q] : state,
 * clock) for q = 0..n-1 in that order, in one call (the dispatcher's
 * snapshots make tens of thousands per iteration). Stops at the first
 * call that would fail, the earlier ones done. Returns 0 or -EINVAL. */
int esd_cmeta_set_states(struct esd_cmeta *cm, const uint32_t *slots, const uint8_t *states,
                         enum esd_row_state state, uint64_t clock, size_t n);
/* If key is cached, make it OUTDATED (a newer version exists elsewhere).
 * Returns 1 if it was cached, 0 if not. */
int esd_cmeta_mark_outdated(struct esd_cmeta *cm, esd_key_t key);
/* esd_cmeta_mark_outdated on keys[0..n) in that order, the lookups batched
 * and prefetched. Returns how many were cached. */
size_t esd_cmeta_mark_outdated_batch(struct esd_cmeta *cm, const esd_key_t *keys, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* ESD_POLICY_H */
