/*
 * Private to dispatch/: the snapshots' mirror kept by key (docs/dispatch.md
 * §9). Under LRU, with at most KM_WORKERS workers and no HET, a snapshot
 * set keeps its workers' caches by key instead of by worker: each key's
 * directory entry (keydir.h) holds, per worker holding it, the key's place
 * in that worker's LRU ring, its use count and Emark mark; the copies'
 * states are the directory's masks (DIRTY on 'dirty', CLEAN where latest,
 * else OUTDATED). A worker keeps its ring of keys, its count and Emark's
 * target. So an advance touches each needed key's entry, not one index,
 * slot and ring line per worker and key, and has no OUTDATED pass: the
 * directory's masks are the states.
 *
 * The rules are esd/policy_rules.h's, as in cache/: a present copy is
 * touched (its old place stale, its new place among the iteration's in
 * key order), an absent one inserted in key order with a victim (the
 * oldest live place) once the cache is full. So the mirror makes the
 * decisions a block would; tests/dispatch/test_mirror.c checks it
 * against blocks after every step.
 *
 * The ring holds the keys' directory indices (km_reindex rewrites them
 * after a rehash), so that a victim's or a compaction's entry is one line
 * away, with no probe. Each iteration's places are one range, logged with the iteration, so
 * a copy's last use is its place's range: what a block made from the
 * mirror (esd_cmeta_from_rows) needs.
 */
#ifndef ESD_DISPATCH_MIRROR_H
#define ESD_DISPATCH_MIRROR_H

#include "keydir.h"
#include "keytab_internal.h"

#include <esd/policy.h>
#include <stdint.h>

/* An advance compacts a ring (or a snapshot's, by blocks) this many
 * iterations of its keys before it has to, one per advance at most. */
#define COMPACT_AHEAD 16

/* One worker's cache, kept by key. */
struct km_worker {
	uint32_t cap, count;
	uint32_t target, at_target; /* Emark's */
	/* the LRU ring: places [head, tail) of size; the keys at them */
	uint32_t head, tail, size;
	uint32_t *ring;
	uint64_t *stale;
	/* places [rstart[q], rstart[q + 1]) (the last: to tail) were given
	 * in iteration riter[q]; nr ranges */
	uint32_t *rstart;
	uint64_t *riter;
	size_t nr, cap_r;
	/* scratch of an advance: the absent keys' entries and list index */
	uint32_t *abx, *abi;
	size_t cap_ab;
};

struct km {
	uint32_t n;
	struct km_worker w[KM_WORKERS];
	struct esd_cmeta_row *rows; /* scratch of km_block */
	size_t cap_rows;
};

/* n <= KM_WORKERS empty caches of capacity cap[j]. 0 or -ENOMEM. */
int km_init(struct km *km, uint32_t n, const uint32_t *cap);
void km_free(struct km *km);

/* The mirror from blocks (every one under LRU) whose keys the directory
 * holds (rebuilt from them): each ring in the block's LRU order with its
 * last uses, counts, marks and targets. 0, -ENOMEM or -ESD_EDIVERGED (a
 * block and the directory disagree, or a ring has no room). */
int km_from_blocks(struct km *km, struct keydir *dir, struct esd_cmeta *const *cm);

/* Advance by iteration t: kt filled (found[u]: each key's entry) and its
 * consequence computed into cq with the per-worker lists' lengths wlen.
 * Touches, inserts, evictions (cq's EVICT_PUSH lists), the directory.
 * tA and tB receive the ends of the two passes (esd_now_ns).
 * 0, -ENOSPC (checked before any change), -ENOMEM (likewise),
 * -ESD_EDIVERGED (the key table's pulls are not the mirror's: kt was not
 * filled from this set, which must be reloaded) or -EUCLEAN (no victim
 * where the count promised one: a damaged mirror). */
int km_advance(struct km *km, struct keydir *dir, const struct esd_keytab *kt,
               const uint32_t *found, const uint32_t *wlen, uint64_t t, enum esd_sync sync,
               struct esd_conseq *cq, int64_t *tA, int64_t *tB);

/* Format mem (len bytes) as worker w's block, as it stands after
 * iteration iter (esd_cmeta_from_rows; clocks 0). */
int km_block(struct km *km, const struct keydir *dir, uint32_t w, uint64_t iter, void *mem,
             size_t len, struct esd_cmeta **out);

/* After a rehash of the directory: every ring entry names its key's new
 * entry. O(directory + copies). */
void km_reindex(struct km *km, const struct keydir *dir);

/* Consistency of rings, counts and directory, O(rings + directory).
 * 0 or -ESD_EDIVERGED (the first difference logged). */
int km_check(const struct km *km, const struct keydir *dir);

#endif
