/*
 * esd/dedup.h - exactly-once application of pushes on the PS.
 *
 * Every push frame (PUSH_VALUE, PUSH_GRAD) carries the worker's push
 * sequence: esdd numbers its push frames 1, 2, 3, ... over the whole job
 * (0: unnumbered, never filtered). The transport already delivers each
 * frame once per link; a push can still arrive twice when a daemon re-sends
 * after a reconnect. The PS applies a worker's push only when its sequence
 * is above the last one it applied for that worker, and answers a
 * duplicate with ACK status 1 without applying it again.
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

/* Whether worker's push with this sequence is new (apply it) rather than
 * one already applied. */
static inline int esd_dedup_fresh(const struct esd_dedup *d, uint32_t worker, uint64_t sequence)
{
	return sequence == 0 || sequence > d->last[worker];
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
