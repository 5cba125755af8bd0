/*
 * esd/cache.h - the embedding cache of a node daemon, in huge-page shared
 * memory that its trainer processes map and read in place.
 *
 * Model
 * -----
 * One region per node daemon: a memfd, backed by 2 MiB huge pages
 * (MFD_HUGETLB) when the kernel has them reserved, else by 4 KiB pages
 * with a logged warning (never silently). The daemon creates it
 * (esd_cache_create) and passes the fd to its trainer over a unix socket
 * (SCM_RIGHTS); the trainer maps it with esd_cache_attach_fd. The region
 * holds, at fixed offsets (no pointers; docs/shm-layout.md has every
 * field and its writer):
 *
 *   meta area    header (magic, version, sizes, generation, checksum),
 *                the daemon's sync words, per-table counters, and the
 *                cache metadata (an esd_cmeta block, esd/policy.h)
 *   rows area    per slot the vector (float32 x dim) and the optimizer
 *                state (none for SGD, dim floats for Adagrad, 2 x dim for
 *                Adam), each array with a 64-byte aligned row stride
 *   grad area    the trainer's sync words, then one gradient slot per
 *                row (float32 x dim)
 *
 * Slot i of the metadata describes row i of every array.
 *
 * Who writes what
 * ---------------
 * The daemon is the only writer of the meta and rows areas; the trainer
 * writes only the grad area. A trainer mapping (flags 0) maps the meta and
 * rows areas read-only, so a stray write faults instead of corrupting the
 * cache.
 *
 * One iteration (the memory-ordering protocol; C11 acquire/release)
 * -----------------------------------------------------------------
 *   daemon:  esd_cache_begin_iter (metadata updated inside a seqlock),
 *            pulls rows into slots, sets states, then
 *            esd_cache_publish(iter)                       release
 *   trainer: esd_cache_wait_published(iter)                acquire
 *            reads vectors in place, writes gradients of the slots
 *            pinned for iter, then esd_cache_grad_commit(iter)  release
 *   daemon:  esd_cache_grad_committed() == iter            acquire
 *            then reads the gradients and applies them.
 * A trainer that dies before its commit leaves gradients nobody counts:
 * the daemon sees the commit word still at an older iteration and zeroes
 * those slots (esd_cache_grad_zero) before replaying. Readers of metadata
 * outside an iteration boundary (esdctl) bracket their reads with
 * esd_cache_meta_read_begin / _retry.
 *
 * Caveats
 * -------
 * - Huge pages must be reserved beforehand (vm.nr_hugepages); the region
 *   is sized in whole 2 MiB pages either way. The exact byte count is
 *   logged before mapping.
 * - One trainer per region writes gradients (one trainer per node).
 * - Not async-signal-safe; one daemon thread mutates metadata at a time.
 */
#ifndef ESD_CACHE_H
#define ESD_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <esd/policy.h>
#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum esd_cache_pages {
	ESD_CACHE_PAGES_AUTO = 0,  /* huge pages, else 4 KiB with a warning */
	ESD_CACHE_PAGES_HUGE = 1,  /* huge pages or fail (-ENOMEM) */
	ESD_CACHE_PAGES_SMALL = 2, /* 4 KiB pages (tests, benchmarks) */
};

struct esd_cache_config {
	uint32_t rows;                /* capacity in rows (slots), 1 .. 2^30 */
	uint32_t dim;                 /* floats per vector, 1 .. 65536 */
	enum esd_optimizer optimizer; /* sizes the optimizer state */
	uint32_t ntables;             /* tables with their own counters, >= 1 */
	enum esd_policy policy;       /* initial eviction policy */
	enum esd_cache_pages pages;
	uint64_t generation; /* 0: taken from the realtime clock */
	const char *name;    /* memfd name (debugging); NULL: "esd-cache" */
};

/* Sizes of a region, as laid out for a configuration. */
struct esd_cache_sizes {
	uint64_t total;        /* bytes of the region (a multiple of 2 MiB) */
	uint64_t meta;         /* meta area (header, counters, metadata) */
	uint64_t cmeta;        /* of which the esd_cmeta block */
	uint64_t rows;         /* rows area (vectors + optimizer state) */
	uint64_t grads;        /* grad area (trainer words + gradients) */
	uint64_t vec_stride;   /* bytes between two vectors (64-aligned) */
	uint64_t state_stride; /* bytes between two optimizer states (0: SGD) */
	uint64_t grad_stride;  /* bytes between two gradients */
};

struct esd_cache_info {
	uint32_t rows, dim, ntables;
	enum esd_optimizer optimizer;
	uint64_t generation;
	uint64_t bytes;
	size_t page_size; /* 2 MiB (huge pages) or 4 KiB */
	bool meta_writable;
};

/* Per-table counters, fed by esd_cache_begin_iter. */
struct esd_cache_counters {
	uint64_t hits;          /* needed rows held latest (CLEAN/DIRTY) */
	uint64_t miss_absent;   /* needed rows not cached */
	uint64_t miss_outdated; /* needed rows cached OUTDATED */
	uint64_t evict_clean;   /* victims that needed no push */
	uint64_t evict_dirty;   /* victims that were evict-pushed */
};

struct esd_cache;

/* Compute the layout for cfg. Returns 0 or -EINVAL (a field out of range,
 * named in the log). */
int esd_cache_size(const struct esd_cache_config *cfg, struct esd_cache_sizes *out);

/* Daemon: create, size (exact byte count logged first), map read-write
 * and format a region: header, empty metadata, zero counters and rows.
 * The cache owns the memfd (esd_cache_fd); esd_cache_close closes it.
 * Returns 0, -EINVAL (config), -ENOMEM (no memory; or PAGES_HUGE and not
 * enough huge pages reserved), or another -errno of memfd_create,
 * ftruncate, mmap. */
int esd_cache_create(const struct esd_cache_config *cfg, struct esd_cache **out);

/* Attach flags. */
#define ESD_CACHE_ATTACH_RW 1u /* map the meta and rows areas writable too */

/* Map the region behind fd (a memfd from esd_cache_create, received over
 * a socket) and validate its header: magic, layout version, checksum,
 * sizes against the fd's size and the layout the header's configuration
 * implies, then the metadata block. Flags 0 (a trainer): meta and rows
 * read-only, grad area writable. fd is duplicated; the caller keeps its
 * own. Returns 0, -EBADF, -ESD_EBADMAGIC, -ESD_EBADVERSION, -ESD_EBADSUM,
 * -EINVAL (a size or offset field wrong: the field is named in the log),
 * or -errno of fstat/mmap/mprotect. */
int esd_cache_attach_fd(int fd, unsigned flags, struct esd_cache **out);

/* Unmap and close. NULL is fine. */
void esd_cache_close(struct esd_cache *c);

int esd_cache_fd(const struct esd_cache *c);
void esd_cache_get_info(const struct esd_cache *c, struct esd_cache_info *out);

/* The metadata. esd_cache_meta returns NULL on a read-only (trainer)
 * mapping; esd_cache_meta_ro always works. Owned by the cache. */
struct esd_cmeta *esd_cache_meta(struct esd_cache *c);
const struct esd_cmeta *esd_cache_meta_ro(const struct esd_cache *c);

/* Row accessors by slot; NULL if slot >= rows (or no state: SGD). The
 * vector and state are read-only in a trainer mapping. */
float *esd_cache_vec(const struct esd_cache *c, uint32_t slot);
float *esd_cache_state(const struct esd_cache *c, uint32_t slot);
float *esd_cache_grad(const struct esd_cache *c, uint32_t slot);
/* The whole mapping and its length in *len (rows included), e.g. to let
 * links send rows from it in place (esd_transport_register_memory). */
void *esd_cache_map(const struct esd_cache *c, size_t *len);

/* Parts of a row for gather/scatter; a gathered row is the selected parts
 * back to back in this order, packed (no padding). */
#define ESD_CACHE_VEC   1u
#define ESD_CACHE_STATE 2u
#define ESD_CACHE_GRAD  4u
size_t esd_cache_row_bytes(const struct esd_cache *c, unsigned parts);

/* Copy rows slots[0..n) into dst (n x esd_cache_row_bytes(parts) bytes),
 * prefetching ahead. Returns 0 or -EINVAL (no/unknown parts, a slot out of
 * range: nothing is copied). */
int esd_cache_gather(const struct esd_cache *c, const uint32_t *slots, size_t n, unsigned parts,
                     void *dst);
/* The reverse. Returns 0, -EINVAL, or -EPERM (VEC/STATE on a trainer
 * mapping). */
int esd_cache_scatter(struct esd_cache *c, const uint32_t *slots, size_t n, unsigned parts,
                      const void *src);

/* Daemon: esd_cmeta_begin_iter inside the metadata seqlock, then the
 * per-table counters from the fill (table = esd_key_table; tables >=
 * ntables count in an extra "other" row). Same returns as
 * esd_cmeta_begin_iter, plus -EPERM on a read-only mapping. */
int esd_cache_begin_iter(struct esd_cache *c, uint64_t iter, const esd_key_t *keys, size_t n,
                         struct esd_cmeta_fill *fill);

/* Daemon: bracket any other metadata mutation (set_state, mark_outdated,
 * lookahead, set_policy) so seqlock readers see it whole. Nests not. */
void esd_cache_meta_write_begin(struct esd_cache *c);
void esd_cache_meta_write_end(struct esd_cache *c);
/* Reader: seq = read_begin(); copy what you need; if read_retry(seq),
 * start again. read_begin waits out a writer in progress. */
uint64_t esd_cache_meta_read_begin(const struct esd_cache *c);
bool esd_cache_meta_read_retry(const struct esd_cache *c, uint64_t seq);

/* Daemon: rows and metadata of iteration iter are ready (release). */
void esd_cache_publish(struct esd_cache *c, uint64_t iter);
/* Last published iteration (acquire). */
uint64_t esd_cache_published(const struct esd_cache *c);
/* Trainer: wait until iteration >= iter is published. timeout_ns < 0:
 * forever. Returns 0 or -ETIMEDOUT. */
int esd_cache_wait_published(const struct esd_cache *c, uint64_t iter, int64_t timeout_ns);

/* Trainer: announce itself (pid in the trainer words). */
void esd_cache_trainer_hello(struct esd_cache *c);
pid_t esd_cache_trainer_pid(const struct esd_cache *c);
/* Trainer: the gradients of iteration iter are all written (release). */
void esd_cache_grad_commit(struct esd_cache *c, uint64_t iter);
/* Daemon: the last committed iteration (acquire); gradients of any later
 * iteration are not to be used. */
uint64_t esd_cache_grad_committed(const struct esd_cache *c);
/* Zero the gradient slots (the daemon, replaying an uncommitted
 * iteration; or the trainer before writing). Returns 0 or -EINVAL. */
int esd_cache_grad_zero(struct esd_cache *c, const uint32_t *slots, size_t n);

/* Counters of table (0 .. ntables; ntables is "other"). Returns 0 or
 * -EINVAL. */
int esd_cache_counters(const struct esd_cache *c, uint32_t table, struct esd_cache_counters *out);
/* Sum over all tables. */
void esd_cache_counters_total(const struct esd_cache *c, struct esd_cache_counters *out);

#ifdef __cplusplus
}
#endif
#endif /* ESD_CACHE_H */
