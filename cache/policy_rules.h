/*
 * Private to cache/: the per-key rules of the eviction policies (touch,
 * insert, Emark's target, leave, the LRU ring's places), inline, which
 * every change of an esd_cmeta block goes through.
 *
 * Emark (ESD §8.1) is kept under every policy: each row carries a mark,
 * the cache a target (starting at 1) and the number of rows whose mark is
 * the target. A needed row takes the target as its mark; when an insert
 * finds the cache full and every row at the target, the target moves on.
 *
 * LRU keeps its victim order (last use, then key) as a ring of places,
 * each iteration's rows appended in key order; a row used again or
 * evicted leaves a stale place behind (one bit in 'stale'), and the victim
 * is the oldest live place. The ring's entries (what a place names: a
 * slot, a key) are the layout's; the places and bits are here. A ring has
 * ESD_RING_PER_ROW places per row of capacity, and is compacted (its live
 * places moved to the front, in order) when an iteration's rows no longer
 * fit at its end.
 *
 * Everything is inline: the loops that call these run over every needed
 * key of every iteration.
 */
#ifndef ESD_CACHE_POLICY_RULES_H
#define ESD_CACHE_POLICY_RULES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Emark's marks, and the use count --------------------------------- */

/* A present row is needed: one more use, its mark moves to the target
 * (one more row at it unless it was there; no branch on the data). */
static inline void esd_rule_touch(uint32_t *freq, uint32_t *mark, uint32_t target,
                                  uint32_t *at_target)
{
	(*freq)++;
	*at_target += *mark != target;
	*mark = target;
}

/* An insert finds the cache full (count rows): before its victim is
 * taken, the target moves on when every row is at it. */
static inline void esd_rule_full(uint32_t *target, uint32_t *at_target, uint32_t count)
{
	if (*at_target == count) {
		(*target)++;
		*at_target = 0;
	}
}

/* A row with this mark leaves the cache (evicted or freed). */
static inline void esd_rule_leave(uint32_t mark, uint32_t target, uint32_t *at_target)
{
	*at_target -= mark == target;
}

/* An absent row is inserted: its first use, at the target. */
static inline void esd_rule_insert(uint32_t *freq, uint32_t *mark, uint32_t target,
                                   uint32_t *at_target)
{
	*freq = 1;
	*mark = target;
	(*at_target)++;
}

/* ---- the LRU ring's places -------------------------------------------- */

#define ESD_RING_PER_ROW 8u
#define ESD_RING_NONE    UINT32_MAX

/* Bytes of the stale bits of a ring of 'places' places. */
static inline size_t esd_ring_stale_bytes(uint32_t places)
{
	return ((size_t)places / 64 + 1) * sizeof(uint64_t);
}

static inline bool esd_ring_live(const uint64_t *stale, uint32_t p)
{
	return !((stale[p / 64] >> (p % 64)) & 1);
}

/* Place p goes stale: its row was used again or left. */
static inline void esd_ring_drop(uint64_t *stale, uint32_t p)
{
	stale[p / 64] |= UINT64_C(1) << (p % 64);
}

/* The oldest live place in [*head, end), *head moved past it; or
 * ESD_RING_NONE (*head = end). The victim of an LRU eviction: 'end' is
 * where the current iteration's places begin, so a row it needs is never
 * taken. */
static inline uint32_t esd_ring_pop(const uint64_t *stale, uint32_t *head, uint32_t end)
{
	while (*head < end) {
		const uint32_t p = (*head)++;
		if (esd_ring_live(stale, p))
			return p;
	}
	return ESD_RING_NONE;
}

/* Places [from, to) live (their bits 0): new places, or a compacted
 * ring's. */
static inline void esd_ring_clear(uint64_t *stale, uint32_t from, uint32_t to)
{
	while (from < to && from % 64) {
		stale[from / 64] &= ~(UINT64_C(1) << (from % 64));
		from++;
	}
	if (from < to && to - from >= 64) {
		memset(&stale[from / 64], 0, (to - from) / 64 * sizeof(uint64_t));
		from += (to - from) / 64 * 64;
	}
	for (; from < to; from++)
		stale[from / 64] &= ~(UINT64_C(1) << (from % 64));
}

/* Compaction, a word of places at a time: the live places of
 * [r, min(next word, tail)) as bits (bit b: place r / 64 * 64 + b), and
 * where the next word starts. A compaction walks r from the head to the
 * tail, moving each live place's entry to the next free place at the
 * front (in order), then clears the bits of [0, tail). */
static inline uint64_t esd_ring_live_word(const uint64_t *stale, uint32_t r, uint32_t tail,
                                          uint32_t *next)
{
	const uint32_t end = (r / 64 + 1) * 64 < tail ? (r / 64 + 1) * 64 : tail;
	uint64_t live = ~stale[r / 64] & (~UINT64_C(0) << (r % 64));
	if (end % 64)
		live &= (UINT64_C(1) << (end % 64)) - 1;
	*next = end;
	return live;
}

#ifdef __cplusplus
}
#endif
#endif /* ESD_CACHE_POLICY_RULES_H */
