/*
 * esd/types.h - the vocabulary every component shares: row keys, row
 * states, transfer kinds, optimizers.
 *
 * Keys: a row is addressed by a 64-bit key, the table id in the high 16
 * bits and the feature ID in the low 48 bits (Criteo's largest table has
 * 10,131,227 rows; 48 bits leave room for hashed IDs).
 */
#ifndef ESD_TYPES_H
#define ESD_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t esd_key_t;

/* splitmix64's increment (2^64 over the golden ratio): the stream from
 * state s draws esd_splitmix64(s + i * ESD_SPLITMIX64_GAMMA), i = 0, 1, ... */
#define ESD_SPLITMIX64_GAMMA UINT64_C(0x9e3779b97f4a7c15)

/* The splitmix64 finaliser: the hash of a key to its PS shard
 * (esd_shard_of, esd/job.h) and the draws of the initial rows
 * (esd/optim.h), the same on every process. */
static inline uint64_t esd_splitmix64(uint64_t x)
{
	x += ESD_SPLITMIX64_GAMMA;
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

/* The splitmix64 generator: the next draw of the stream whose state is
 * *state, which advances by one step. The one small PRNG of the project
 * (seeds, fault injection, the randomised solvers, tests). */
static inline uint64_t esd_splitmix64_next(uint64_t *state)
{
	uint64_t x = esd_splitmix64(*state);
	*state += ESD_SPLITMIX64_GAMMA;
	return x;
}

#define ESD_KEY_ID_BITS 48
#define ESD_KEY_ID_MASK ((UINT64_C(1) << ESD_KEY_ID_BITS) - 1)
#define ESD_MAX_TABLES  65536
/* Upper bound on workers in one job (decisions use small per-worker arrays). */
#define ESD_MAX_WORKERS 64
#define ESD_MAX_TRAINERS 16 /* training processes per node */

static inline esd_key_t esd_key_make(uint32_t table, uint64_t id)
{
	return ((uint64_t)table << ESD_KEY_ID_BITS) | (id & ESD_KEY_ID_MASK);
}

static inline uint32_t esd_key_table(esd_key_t key)
{
	return (uint32_t)(key >> ESD_KEY_ID_BITS);
}

static inline uint64_t esd_key_id(esd_key_t key)
{
	return key & ESD_KEY_ID_MASK;
}

/* State of a row in one worker's cache (docs/design.md §3). */
enum esd_row_state {
	ESD_ROW_ABSENT = 0,   /* not cached */
	ESD_ROW_OUTDATED = 1, /* cached, but not the latest value */
	ESD_ROW_CLEAN = 2,    /* latest value, and the PS has it too */
	ESD_ROW_DIRTY = 3,    /* latest value, the PS does not have it */
};

/* Kinds of row transfer between a worker and the PS, as accounted. */
enum esd_xfer_kind {
	ESD_XFER_MISS_PULL = 0,   /* worker needs a row it does not hold latest */
	ESD_XFER_UPDATE_PUSH = 1, /* DIRTY row others need, or a shared row's gradient */
	ESD_XFER_EVICT_PUSH = 2,  /* DIRTY row evicted from a full cache */
	ESD_XFER_OTHER = 3,       /* control, dense table, stats */
	ESD_XFER_NKINDS = 4,
};

/* A transfer kind's name as JSON keys, metric labels and summaries spell
 * it: "miss_pull", "update_push", "evict_push", "other"; "?" out of range. */
static inline const char *esd_xfer_kind_name(enum esd_xfer_kind k)
{
	static const char *const names[ESD_XFER_NKINDS] = {"miss_pull", "update_push", "evict_push",
	                                                   "other"};
	return (unsigned)k < ESD_XFER_NKINDS ? names[k] : "?";
}

enum esd_optimizer {
	ESD_OPT_SGD = 0,     /* no state */
	ESD_OPT_ADAGRAD = 1, /* one accumulator per element */
	ESD_OPT_ADAM = 2,    /* two moments per element */
};

/* Floats of optimizer state per row element. */
static inline unsigned esd_optimizer_state_floats(enum esd_optimizer opt)
{
	return opt == ESD_OPT_ADAM ? 2u : opt == ESD_OPT_ADAGRAD ? 1u : 0u;
}

#ifdef __cplusplus
}
#endif
#endif /* ESD_TYPES_H */
