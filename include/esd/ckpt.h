/*
 * esd/ckpt.h - the PS checkpoint file: a consistent cut of one PS shard's
 * part of the model at an iteration boundary (rows, optimizer state,
 * clocks, the dense table, the iteration and the data cursor).
 *
 * Format (versions 1 and 2, little-endian, no padding)
 * ----------------------------------------------------
 *   header, 128 bytes:
 *     0   magic "ESDCKPT\0"          8   u32 version (1 or 2)
 *     12  u32 header size (128)      16  u64 job seed
 *     24  u64 iteration (the next one to train)
 *     32  u64 data cursor (index of the next sample of the stream)
 *     40  u64 row count              48  u64 dense table floats
 *     56  u64 dense clock (updates applied to the dense table)
 *     64  u32 row dim                68  u32 optimizer (enum esd_optimizer)
 *     72  u32 state floats per element (must match the optimizer)
 *     76  u32 shard                  80  u32 shard count
 *     84  u32 flags (bit 0: rows in strictly ascending key order; bit 1:
 *         an increment, see below)
 *     88  u64 parent iteration       96  u64 parent file checksum
 *         (both zero unless an increment)
 *     104 version 1: 16 bytes reserved, zero; version 2: u32 table
 *         count n | u32 zero | u64 XXH64 of the table block
 *     120 u64 XXH64 of bytes [0, 120)
 *   version 2 only, the table block, n entries of 16 bytes:
 *     u32 the table's dim d_t (1..dim) | u32 zero | u64 its rows here
 *   rows, row count records of 16 + 4*d*(1 + state floats) bytes:
 *     u64 key | u64 clock | float value[d] | float state[d*sf]
 *   d: version 1, the header's dim for every row (a row of a job with
 *   per-table dims padded with zeros); version 2, d_t of the key's table
 *   (esd_key_table), the state its sf blocks of d_t floats each.
 *   dense: float dense[dense floats] | float dense state[dense floats*sf]
 *   trailer, 48 bytes:
 *     0 magic "ESDCKEND" | 8 u64 row count | 16 u64 dense floats |
 *     24 u64 XXH64 of every byte between header and trailer |
 *     32 u64 the header's checksum | 40 u64 XXH64 of trailer bytes [0, 40)
 * The size of a valid file follows from its header (and table block)
 * alone. A writer given table dims (meta.ntables) writes version 2, else
 * version 1; readers read both and hand every row out at the header's
 * dim, a version-2 row padded with zeros past its table's dim.
 *
 * Increments
 * ----------
 * An increment holds only the rows that changed since its parent, a
 * checkpoint of an earlier iteration of the same shard, plus the whole
 * dense table. Its parent lies in the same directory as
 * "ps-shard<S>.ckpt.inc<I>" (an increment) or "ps-shard<S>.ckpt.base<I>"
 * (a full file), I the parent iteration, and is the one of those whose
 * file checksum (its trailer's XXH64, which covers its header's and its
 * body's) the increment names. esd_ckpt_open of an increment
 * opens and validates its whole chain back to the full base and hands out
 * the merged model: every row once, at its newest value, in the order a
 * full checkpoint of the same shard lists them (base order, then rows
 * created later in the order of the increments that first hold them).
 * Every reader (esd-ps, esd-ref, esd-export, ps.resume_from) goes through
 * it, so a base plus increments reads exactly as one full checkpoint.
 *
 * Atomicity
 * ---------
 * The writer streams into a temporary file in the target's directory
 * (".<name>.tmp.XXXXXX"), and commit writes the trailer and the final
 * header, fsyncs the file, renames it over the target and fsyncs the
 * directory. A crash at any point leaves either the previous checkpoint
 * or the new one under the target name, never a mix; a leftover
 * temporary is garbage (esd_ckpt_remove_temps clears them). Rows are
 * streamed through a small buffer: a shard of millions of rows never
 * needs the file in memory.
 *
 * Validation
 * ----------
 * esd_ckpt_open checks everything before it hands out a single row: the
 * header (magic, version, checksum, field ranges), the file size against
 * the header's counts (a truncated file or trailing bytes), the trailer
 * (magic, checksum, counts, the header's checksum) and, in a full pass,
 * the checksum of the body and, when the header says rows are sorted,
 * their order. Each refusal fills a struct esd_ckpt_error saying what and
 * at which byte offset. The caller (esd-ps) logs it; this library does
 * not log.
 *
 * Rows are unique per file (the writer checks it only when keys come in
 * ascending order; esd_ckpt_compare reports duplicates).
 *
 * Thread safety: a writer or a reader is used by one thread at a time;
 * different objects are independent.
 */
#ifndef ESD_CKPT_H
#define ESD_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_CKPT_VERSION      2u /* the newest this code reads and writes */
#define ESD_CKPT_VERSION_PADDED 1u /* rows all of the header's dim */
#define ESD_CKPT_MAX_TABLES   65536u /* entries of a version-2 table block */
#define ESD_CKPT_HEADER_SIZE  128u
#define ESD_CKPT_TRAILER_SIZE 48u
#define ESD_CKPT_MAX_DIM      65536u
#define ESD_CKPT_FLAG_SORTED  1u
#define ESD_CKPT_FLAG_INCR    2u
#define ESD_CKPT_MAX_CHAIN    64u /* files of an increment chain, base included */

/* What a checkpoint says about itself. */
struct esd_ckpt_meta {
	uint64_t seed;        /* job seed (rows are initialised from it) */
	uint64_t iteration;   /* the next iteration to train */
	uint64_t data_cursor; /* sample index of the stream to resume from */
	uint32_t dim;         /* row length, 1..ESD_CKPT_MAX_DIM (the largest table dim) */
	/* per-table dims (version 2): table t's rows hold table_dims[t]
	 * floats (<= dim); ntables 0: every row dim floats (version 1). The
	 * writer copies them; a reader's point into the reader. */
	uint32_t ntables;
	const uint32_t *table_dims;
	enum esd_optimizer optimizer;
	uint32_t shard;       /* this shard, < nshards */
	uint32_t nshards;     /* shards of the job, >= 1 */
	uint64_t dense_len;   /* floats of the dense table in this file (0: none) */
	uint64_t dense_clock; /* updates applied to the dense table */
	/* An increment (Increments above): rows changed since the parent of
	 * parent_iteration whose file checksum is parent_sum. */
	bool increment;
	uint64_t parent_iteration;
	uint64_t parent_sum;
};

struct esd_ckpt_info {
	struct esd_ckpt_meta meta;
	uint64_t row_count;
	bool sorted;        /* rows in strictly ascending key order */
	uint64_t file_size; /* bytes (of the whole chain for an increment) */
	uint64_t file_sum;   /* this file's trailer checksum (an increment's parent_sum) */
	uint32_t chain;      /* files read: 1, or the increments plus the base */
};

/* Why a file was refused. code is the return value; offset the byte
 * where the problem is (for a checksum, the start of the range it covers);
 * msg says what, with numbers. */
struct esd_ckpt_error {
	int code;
	uint64_t offset;
	char msg[256];
};

/* ---- writing ---------------------------------------------------------- */

struct esd_ckpt_writer;

/*
 * Start a checkpoint that will replace path on commit: creates the
 * temporary file next to it and writes a provisional header.
 * Returns 0 and *out, or -EINVAL (bad meta: dim 0 or too large, unknown
 * optimizer, shard >= nshards, path without a file name), -ENOMEM, or the
 * -errno of creating the temporary (-ENOENT, -EACCES, ...).
 */
int esd_ckpt_writer_open(const char *path, const struct esd_ckpt_meta *meta,
                         struct esd_ckpt_writer **out);

/*
 * Append one row: value[dim] and state[dim * state floats] (state may be
 * NULL when the optimizer has none). Rows come before the dense table.
 * Returns 0, -EINVAL (the dense table was already written; or a key equal
 * to the previous one, a duplicate), or the -errno of write(2) (-ENOSPC,
 * ...); after an I/O error the writer can only be aborted.
 */
int esd_ckpt_write_row(struct esd_ckpt_writer *w, esd_key_t key, uint64_t clock, const float *value,
                       const float *state);

/* Append one row at its table's dim d (meta.table_dims; dim without
 * them): value[d] and state[d * sf], the state's sf blocks of d floats
 * each. Errors as esd_ckpt_write_row, and -EINVAL for a key of a table
 * past meta.ntables. esd_ckpt_write_row takes rows at dim and, with
 * table dims, refuses (-EINVAL) a row with a non-zero value float past
 * its table's dim and drops the state floats past it. */
int esd_ckpt_write_row_packed(struct esd_ckpt_writer *w, esd_key_t key, uint64_t clock,
                              const float *value, const float *state);

/* Append n rows from arrays: keys[n], clocks[n], values[n*dim],
 * states[n*dim*sf] (NULL when sf == 0). Errors as esd_ckpt_write_row. */
int esd_ckpt_write_rows(struct esd_ckpt_writer *w, size_t n, const esd_key_t *keys,
                        const uint64_t *clocks, const float *values, const float *states);

/*
 * Write the dense table (meta.dense_len floats) and its state (dense_len *
 * sf floats; NULL when sf == 0), once, after the last row. Returns 0,
 * -EINVAL (written twice, or dense_len is 0), or an I/O -errno.
 */
int esd_ckpt_write_dense(struct esd_ckpt_writer *w, const float *dense, const float *state);

/*
 * Finish: trailer, final header, fsync, rename over the target, fsync of
 * the directory. Always frees w (on failure the temporary is removed and
 * the previous checkpoint, if any, is untouched). Returns 0, -EINVAL (the
 * dense table is due and was not written, or w is NULL), or the -errno of
 * the failing call. If only the final directory fsync fails, the new file
 * is in place but its durability is not assured: the -errno says so.
 */
int esd_ckpt_writer_commit(struct esd_ckpt_writer *w);

/* Give up: remove the temporary, free w. NULL is fine. */
void esd_ckpt_writer_abort(struct esd_ckpt_writer *w);

/*
 * Remove leftover temporaries of target path (".<name>.tmp.*" in its
 * directory), e.g. after a crash mid-write. Returns the number removed,
 * or a -errno of opening the directory.
 */
int esd_ckpt_remove_temps(const char *path);

/* ---- reading ---------------------------------------------------------- */

struct esd_ckpt_reader;

/*
 * Open and fully validate a checkpoint (see Validation above; this reads
 * the whole file once). Returns 0 and *out (close with esd_ckpt_close), or
 * fills *err (may be NULL) and returns:
 *   -ENOENT, -EACCES, ...   the file cannot be opened or read
 *   -ENODATA                truncated: shorter than its header says (or
 *                           than a header)
 *   -ESD_EBADMAGIC          header or trailer magic wrong
 *   -ESD_EBADVERSION        a version this code does not read (neither
 *                           1 nor 2)
 *   -ESD_EBADSUM            header, trailer or body checksum mismatch
 *   -EBADMSG                fields out of range, counts that disagree
 *                           between header, trailer and size, trailing
 *                           bytes, rows out of order though marked sorted
 *   -ENOMEM
 */
int esd_ckpt_open(const char *path, struct esd_ckpt_reader **out, struct esd_ckpt_error *err);

/* The same on an open file descriptor (read with pread from offset 0;
 * the reader keeps its own dup of fd). An increment cannot be opened
 * this way (its parent is found by path): -EINVAL. */
int esd_ckpt_open_fd(int fd, struct esd_ckpt_reader **out, struct esd_ckpt_error *err);

/*
 * The parent of the checkpoint at path: 1 and its path in buf when path
 * is an increment (the parent file exists and its file checksum is the
 * one named), 0 when path is a full checkpoint, or a -errno (-ENOENT: the
 * parent is missing) with *err filled. Reads headers only.
 */
int esd_ckpt_parent(const char *path, char *buf, size_t len, struct esd_ckpt_error *err);

/* The file checksum of the checkpoint at path (the trailer's checksum,
 * which covers the header's and the body's; what an increment built on
 * it names), from its header and trailer alone: 0, or a -errno. */
int esd_ckpt_file_sum(const char *path, uint64_t *sum);

const struct esd_ckpt_info *esd_ckpt_info(const struct esd_ckpt_reader *r);

/*
 * Row callback: key, clock, value[dim], state[dim * sf] (NULL when sf is
 * 0), padded with zeros past the row's table dim in a version-2 file. The pointers are valid during the call only. Return 0 to go on;
 * anything else stops the walk and is returned by esd_ckpt_read_rows.
 */
typedef int (*esd_ckpt_row_fn)(void *arg, esd_key_t key, uint64_t clock, const float *value,
                               const float *state);

/*
 * Deliver every row in file order. The body is checksummed again on the
 * way; if it no longer matches (the file was modified in place since
 * open), returns -ESD_EBADSUM after the last row and the caller must
 * discard what it received. Returns 0, the callback's non-zero value, an
 * I/O -errno, -ESD_EBADSUM, -ENOMEM.
 */
int esd_ckpt_read_rows(struct esd_ckpt_reader *r, esd_ckpt_row_fn fn, void *arg);

/* Read the dense table into dense[dense_len] and state[dense_len * sf]
 * (state may be NULL to skip it). Returns 0, -EINVAL (NULL dense), or an
 * I/O -errno. */
int esd_ckpt_read_dense(struct esd_ckpt_reader *r, float *dense, float *state);

void esd_ckpt_close(struct esd_ckpt_reader *r);

/* ---- comparing -------------------------------------------------------- */

struct esd_ckpt_cmp_opts {
	double rtol; /* values differ when |a-b| > atol + rtol * max(|a|, |b|) */
	double atol;
	bool exact;  /* compare bits instead (two runs must be bit-identical) */
	bool state;  /* also compare optimizer state */
	bool clocks; /* also require equal clocks */
};

struct esd_ckpt_cmp_result {
	bool equal; /* every check below passed */
	uint64_t rows_a, rows_b;
	uint64_t rows_differ;    /* rows in both sets whose values/state/clock differ */
	uint64_t only_a, only_b; /* rows present on one side only */
	uint64_t duplicates;     /* keys present twice on one side */
	bool meta_differ;        /* seed, iteration, cursor, dim, optimizer, dense clock */
	bool dense_differ;
	double max_abs; /* over every compared float */
	double max_rel; /* |a-b| / max(|a|, |b|); 0 where both are 0 */
	bool has_first;
	esd_key_t first_key;  /* smallest key that differs (or is on one side only) */
	char first_what[160]; /* what differs first: meta, dense, or that key */
};

/*
 * Compare two models, each given as its set of shard checkpoint files
 * (a PS with several shards against the single-file reference, or two
 * runs). Rows are matched by key across all files of a side; the dense
 * table is taken from the one file of each side that holds it. Side A is
 * held in memory (rows, values and, if compared, state): meant for tests
 * and tools, not for production-sized models.
 * opts NULL means rtol 1e-5, atol 1e-8, state and clocks compared.
 * Returns 0 with *res filled (res->equal says the verdict), or the error
 * of opening a file (with *err filled as esd_ckpt_open does), -EINVAL (no
 * files on a side, or the dense table in several files of one side),
 * -ENOMEM.
 */
int esd_ckpt_compare(const char *const *a, size_t na, const char *const *b, size_t nb,
                     const struct esd_ckpt_cmp_opts *opts, struct esd_ckpt_cmp_result *res,
                     struct esd_ckpt_error *err);

#ifdef __cplusplus
}
#endif
#endif /* ESD_CKPT_H */
