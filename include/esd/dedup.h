/*
 * esd/dedup.h - exactly-once application of pushes on the PS.
 *
 * Every push frame (PUSH_VALUE, PUSH_GRAD) carries (worker, iteration,
 * sequence): sequence counts a worker's push frames within an iteration
 * from 0, and the worker's BARRIER for that iteration says how many it sent
 * (npushes). The transport already delivers each frame once per link; a
 * push can still arrive twice when a daemon re-sends after a reconnect.
 * esd_dedup_check() says whether a push is new (apply it) or a duplicate
 * (acknowledge it again, do not apply it).
 *
 * Model: per worker, the current iteration and a bitmap of the sequences
 * seen in it. A push of a later iteration starts that iteration (the
 * earlier one is closed: under BSP its barrier has passed); a push of an
 * earlier iteration is a duplicate. Sequences are bounded by
 * ESD_DEDUP_MAX_SEQ per iteration.
 *
 * Threads: different workers may be checked from different threads at
 * once (state is per worker); one worker's pushes from one thread at a time.
 */
#ifndef ESD_DEDUP_H
#define ESD_DEDUP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_DEDUP_MAX_SEQ (1u << 24)

struct esd_dedup;

/* Filter for workers 0..nworkers-1 (caller frees with esd_dedup_destroy).
 * Returns 0, -EINVAL (nworkers 0 or above 1<<20) or -ENOMEM. */
int esd_dedup_create(uint32_t nworkers, struct esd_dedup **out);
/* Accepts NULL. */
void esd_dedup_destroy(struct esd_dedup *d);

/*
 * Check and mark one push. Returns 1 if it is new (the caller applies it),
 * 0 if it is a duplicate, -EINVAL if worker >= nworkers, -ERANGE if
 * sequence >= ESD_DEDUP_MAX_SEQ, -ENOMEM.
 */
int esd_dedup_check(struct esd_dedup *d, uint32_t worker, uint64_t iteration, uint64_t sequence);

/* Distinct pushes of worker seen in iteration (0 for another iteration than
 * the worker's current one); compare with BARRIER.npushes. Returns the
 * count, or -EINVAL for a bad worker. */
int64_t esd_dedup_count(const struct esd_dedup *d, uint32_t worker, uint64_t iteration);

/* Forget everything (e.g. after restoring a checkpoint). */
void esd_dedup_reset(struct esd_dedup *d);

#ifdef __cplusplus
}
#endif
#endif /* ESD_DEDUP_H */
