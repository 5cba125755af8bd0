/*
 * esd/dedup.h - the push sequence rule of the PS.
 *
 * Every push frame (PUSH_VALUE, PUSH_GRAD) carries its sequence on its
 * link: esdd numbers the push frames it sends to a shard 1, 2, 3, ... from
 * the link's HELLO (a new link starts again at 1; 0: unnumbered, never
 * checked). The transport delivers each frame once and in order, so a
 * shard expects exactly the next sequence: a lower one is a re-sent push
 * (not applied again), a higher one means pushes were lost, and esd-ps
 * fails the job on either rather than drop anything silently. BARRIER
 * carries the count of pushes since the previous barrier as a second check.
 *
 * Model: per worker, the last applied sequence. A value type (no
 * allocation); the caller guards it (esd-ps: under ps->mu) and bounds
 * worker below ESD_MAX_WORKERS.
 */
#ifndef ESD_DEDUP_H
#define ESD_DEDUP_H

#include <esd/types.h>

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

struct esd_dedup {
	uint64_t last[ESD_MAX_WORKERS]; /* last applied push sequence per worker */
};

/* Forget everything (e.g. at start, or after restoring a checkpoint). */
static inline void esd_dedup_reset(struct esd_dedup *d)
{
	memset(d, 0, sizeof(*d));
}

/* A worker's new link: its sequences start again at 1. */
static inline void esd_dedup_forget(struct esd_dedup *d, uint32_t worker)
{
	d->last[worker] = 0;
}

/* Whether worker's push with this sequence is new (apply it) rather than
 * one already applied. */
static inline int esd_dedup_fresh(const struct esd_dedup *d, uint32_t worker, uint64_t sequence)
{
	return sequence == 0 || sequence > d->last[worker];
}

/* The strict rule: 0 when sequence is the next one (or 0: unnumbered),
 * 1 when it was applied already (a re-send), -1 when some before it never
 * came (a gap). */
static inline int esd_dedup_check(const struct esd_dedup *d, uint32_t worker, uint64_t sequence)
{
	if (sequence == 0 || sequence == d->last[worker] + 1)
		return 0;
	return sequence <= d->last[worker] ? 1 : -1;
}

/* Record that worker's push with this sequence was applied. */
static inline void esd_dedup_applied(struct esd_dedup *d, uint32_t worker, uint64_t sequence)
{
	if (sequence > d->last[worker])
		d->last[worker] = sequence;
}

#ifdef __cplusplus
}
#endif
#endif /* ESD_DEDUP_H */
