/*
 * region_impl.h - layout of the cache region (private to cache/). The
 * authoritative description, with every field's writer, is
 * docs/shm-layout.md; keep the two in step.
 */
#ifndef ESD_CACHE_REGION_IMPL_H
#define ESD_CACHE_REGION_IMPL_H

#include <esd/cache.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define REGION_MAGIC   UINT64_C(0x4548434143445345) /* "ESDCACHE" */
#define REGION_VERSION 1u
#define REGION_ALIGN   (UINT64_C(2) << 20) /* areas start on 2 MiB: mprotect-able */
#define REGION_HUGE    (UINT64_C(2) << 20)

#define REGION_F_HUGETLB 1u

/* Offset 0. Written once by the daemon at creation, then never: it is
 * what the checksum covers. */
struct region_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;
	uint64_t total_bytes;
	uint64_t generation;
	uint32_t rows;
	uint32_t dim;
	uint32_t optimizer;
	uint32_t state_floats; /* per element: 0, 1, 2 */
	uint32_t ntables;
	uint32_t flags;        /* REGION_F_* */
	uint64_t counters_off; /* (ntables + 1) x struct region_counters */
	uint64_t cmeta_off;
	uint64_t cmeta_bytes;
	uint64_t rows_off; /* start of the rows area */
	uint64_t vec_off, vec_stride;
	uint64_t state_off, state_stride;
	uint64_t grads_off; /* start of the grad area: struct region_trainer */
	uint64_t grad_off, grad_stride;
	uint64_t checksum; /* FNV-1a 64 of the bytes before it */
	uint8_t reserved[40];
};
_Static_assert(sizeof(struct region_hdr) == 192, "region header size");
_Static_assert(offsetof(struct region_hdr, checksum) == 144, "checksum offset");

/* Offset 192: written by the daemon only, read by trainers and tools. */
struct region_daemon {
	_Atomic uint64_t meta_seq;       /* seqlock: odd while metadata changes */
	_Atomic uint64_t published_iter; /* rows of this iteration are ready */
	_Atomic uint64_t daemon_pid;
	uint8_t pad[40];
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct region_daemon) == 64, "one cache line");

#define REGION_DAEMON_OFF 192u

/* One line per table (+1 "other"): written by the daemon only. */
struct region_counters {
	_Atomic uint64_t hits, miss_absent, miss_outdated, evict_clean, evict_dirty;
	uint64_t pad[3];
};
_Static_assert(sizeof(struct region_counters) == 64, "one cache line");

/* At grads_off: written by the trainer only (the daemon reads). */
struct region_trainer {
	_Atomic uint64_t grad_iter;   /* gradients of this iteration are complete */
	_Atomic uint64_t trainer_pid; /* set by esd_cache_trainer_hello */
	uint8_t pad[48];
};
_Static_assert(sizeof(struct region_trainer) == 64, "one cache line");

struct esd_cache {
	uint8_t *base;
	size_t len;
	int fd;
	bool meta_rw;
	size_t page_size;
	const struct region_hdr *hdr;
	struct region_daemon *daemon;
	struct region_counters *counters;
	struct region_trainer *trainer;
	struct esd_cmeta *cm;
	uint32_t rows, dim, ntables, state_floats;
	uint64_t vec_stride, state_stride, grad_stride;
	uint8_t *vec, *state, *grad;
};

/* region.c */
int esd_region_layout(const struct esd_cache_config *cfg, struct region_hdr *h,
                      struct esd_cache_sizes *sz);
uint64_t esd_region_checksum(const struct region_hdr *h);

#endif /* ESD_CACHE_REGION_IMPL_H */
