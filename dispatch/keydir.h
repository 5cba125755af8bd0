/*
 * Private to dispatch/: the key directory of a snapshot set. One entry per
 * key cached on some worker: which workers hold it, which hold it latest,
 * which holds it DIRTY. It answers the dispatcher's question "where is the
 * latest value of x" with one probe per key instead of one per worker and
 * key, and is advanced together with the snapshots (never by itself).
 *
 * Linear probing, no deletion: a key evicted everywhere stays as an entry
 * with cached == 0 (same meaning as absent) until the next rehash, so entry
 * indices stay valid while an iteration is applied.
 *
 * An entry is 32 bytes, two to a cache line. Address entries with
 * keydir_at, never by indexing the table.
 */
#ifndef ESD_DISPATCH_KEYDIR_H
#define ESD_DISPATCH_KEYDIR_H

#include <stddef.h>
#include <stdint.h>
#include <esd/dispatch.h> /* ESD_NO_WORKER */
#include <esd/types.h>

struct keydir_ent {
	uint64_t key;
	uint64_t latest;
	uint64_t cached;
	uint64_t version : 48; /* HET mode: iterations that trained the key (=
	                        * the PS row clock under full-set sync) */
	uint64_t dirty : 8;    /* ESD_NO_WORKER when none */
	uint64_t used : 8;     /* 1: slot holds 'key' (possibly cached == 0) */
};
_Static_assert(sizeof(struct keydir_ent) == 32, "keydir entry size");

#define KEYDIR_NONE UINT32_MAX

struct keydir {
	char *t;        /* size entries */
	uint32_t shift; /* log2 of an entry's bytes (5) */
	uint32_t bits;
	size_t size, used;
	uint64_t gen;      /* changes when entries move (rehash, clear) */
	int keep_versions; /* HET mode: a rehash keeps keys cached nowhere
	                    * whose version is not 0 */
};

static inline uint32_t kd_hash(esd_key_t key, uint32_t bits)
{
	return (uint32_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - bits));
}

static inline struct keydir_ent *keydir_at(const struct keydir *kd, size_t h)
{
	return (struct keydir_ent *)(kd->t + (h << kd->shift));
}

/* esd_keydir_find, inline: for loops that use each entry as they find it. */
static inline uint32_t keydir_probe(const struct keydir *kd, esd_key_t key)
{
	const uint32_t mask = (uint32_t)kd->size - 1;
	for (uint32_t h = kd_hash(key, kd->bits);; h = (h + 1) & mask) {
		const struct keydir_ent *e = keydir_at(kd, h);
		if (!e->used)
			return KEYDIR_NONE;
		if (e->key == key)
			return h;
	}
}

/* For a loop over keys[0..n) at i: the home lines of the next keys are
 * requested KEYDIR_AHEAD keys ahead (the first ones at i = 0), so the
 * directory's DRAM misses overlap (the fill's work per key is short, so
 * it looks far ahead; bench/results/dispatch.md). always_inline:
 * a helper holding only prefetches has no side effects, so GCC drops calls
 * to it unless it is inlined first. */
#define KEYDIR_AHEAD 32
static inline __attribute__((always_inline)) void
keydir_prefetch_ahead(const struct keydir *kd, const esd_key_t *keys, size_t n, size_t i)
{
	if (i == 0)
		for (size_t q = 0; q < KEYDIR_AHEAD && q < n; q++)
			__builtin_prefetch(keydir_at(kd, kd_hash(keys[q], kd->bits)));
	if (i + KEYDIR_AHEAD < n)
		__builtin_prefetch(keydir_at(kd, kd_hash(keys[i + KEYDIR_AHEAD], kd->bits)));
}

int esd_keydir_init(struct keydir *kd, size_t live_hint);
void esd_keydir_free(struct keydir *kd);
void esd_keydir_clear(struct keydir *kd);
/* Make room for 'more' insertions without a rehash during them. */
int esd_keydir_reserve(struct keydir *kd, size_t more);
uint32_t esd_keydir_find(const struct keydir *kd, esd_key_t key);
/* Index of key, inserting an empty entry (cached nowhere: the same meaning
 * as none) if it has none; call esd_keydir_reserve first. Inline: the fill
 * calls it for every key of a batch. */
static inline uint32_t keydir_insert(struct keydir *kd, esd_key_t key)
{
	const uint32_t mask = (uint32_t)kd->size - 1;
	for (uint32_t h = kd_hash(key, kd->bits);; h = (h + 1) & mask) {
		struct keydir_ent *e = keydir_at(kd, h);
		if (!e->used) {
			e->used = 1;
			e->key = key;
			e->latest = e->cached = 0;
			e->version = 0;
			e->dirty = ESD_NO_WORKER;
			kd->used++;
			return h;
		}
		if (e->key == key)
			return h;
	}
}

#endif
