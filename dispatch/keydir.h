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
 */
#ifndef ESD_DISPATCH_KEYDIR_H
#define ESD_DISPATCH_KEYDIR_H

#include <stddef.h>
#include <stdint.h>
#include <esd/types.h>

/* 32 bytes: two entries to a cache line, none across two. */
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
	struct keydir_ent *t;
	uint32_t bits;
	size_t size, used;
	uint64_t gen;      /* changes when entries move (rehash, clear) */
	int keep_versions; /* HET mode: a rehash keeps keys cached nowhere
	                    * whose version is not 0 */
};

int keydir_init(struct keydir *kd, size_t live_hint);
void keydir_free(struct keydir *kd);
void keydir_clear(struct keydir *kd);
/* Make room for 'more' insertions without a rehash during them. */
int keydir_reserve(struct keydir *kd, size_t more);
void keydir_find_batch(const struct keydir *kd, const esd_key_t *keys, size_t n, uint32_t *idx);
uint32_t keydir_find(const struct keydir *kd, esd_key_t key);
/* Index of key, inserting an empty entry (call keydir_reserve first). */
uint32_t keydir_insert(struct keydir *kd, esd_key_t key);

#endif
