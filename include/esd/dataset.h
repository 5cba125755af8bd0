/*
 * esd/dataset.h - the dataset stream: a compact, checksummed binary file of
 * training samples, its streaming reader and writer, the built-in dataset
 * shapes and the synthetic generator (library esd_data, tool esd-data).
 *
 * Model
 *   A stream is a sequence of samples. A sample is a label (0 or 1), ndense
 *   dense features (float) and one ID per embedding table (ntables IDs, the
 *   ID of table t is below the table's cardinality rows[t]), or for a
 *   multi-hot table (max_bag[t] > 1) a bag of 0..max_bag[t] IDs. Readers
 *   hand the IDs out as 64-bit row keys, esd_key_make(t, id) (esd/types.h),
 *   in sample-major order: keys[s * ntables + t] (esd_ds_read), or bag by
 *   bag with offsets (esd_ds_read_bags).
 *
 *   The file is a header (shape name, tables and their cardinalities, dense
 *   count, sample count, generator parameters for provenance), blocks of up
 *   to block_samples samples each with an xxh64 checksum (optionally zstd
 *   compressed), and a block index at the end. docs/dataset.md has the byte
 *   layout.
 *
 *   The reader streams: it holds one decoded block in memory whatever the
 *   file size. A "data cursor" is the index of the next sample to read;
 *   esd_ds_tell() gives it, esd_ds_seek() restores it (checkpoint/restart),
 *   and reading the same cursor range always returns the same samples.
 *
 * Errors
 *   Functions return 0 (or a count) or a negative errno. Bad input (wrong
 *   magic, version, a checksum mismatch, a truncated file, a writer that
 *   never closed the file) is refused with -ESD_EBADMAGIC, -ESD_EBADVERSION,
 *   -ESD_EBADSUM or -EPROTO, and a message naming the file and the byte
 *   offset and block is logged (component "data") and kept for
 *   esd_ds_last_error().
 *
 * Caveats
 *   - Readers and writers are not thread-safe; use one per thread (several
 *     readers of one file are fine).
 *   - The layout is little-endian; the library only builds on
 *     little-endian hosts.
 *   - A writer's file is complete only after esd_ds_writer_close()
 *     returned 0; a crashed writer leaves a file every reader refuses.
 */
#ifndef ESD_DATASET_H
#define ESD_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include <esd/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ESD_DS_MAX_TABLES    256             /* tables per sample */
#define ESD_DS_MAX_DENSE     256             /* dense features per sample */
#define ESD_DS_MAX_ROWS      ESD_KEY_ID_MASK /* cardinality bound: IDs fit a key */
#define ESD_DS_NAME_LEN      32              /* shape name, NUL included */
#define ESD_DS_SOURCE_LEN    64              /* provenance text, NUL included */
#define ESD_DS_BLOCK_SAMPLES 4096            /* default samples per block */
#define ESD_DS_MAX_BAG       65535           /* IDs in one bag (multi-hot table) */

/* How dense features are stored (both read back as float). */
enum esd_ds_dense_format {
	ESD_DS_DENSE_F32 = 0,  /* IEEE float32, exact */
	ESD_DS_DENSE_BF16 = 1, /* bfloat16 (top half of a float32, rounded): half the bytes */
};

/* Where the samples came from. */
enum esd_ds_origin {
	ESD_DS_ORIGIN_GEN = 0,           /* esd_ds_generate */
	ESD_DS_ORIGIN_CRITEO_KAGGLE = 1, /* converted from Criteo Kaggle TSV */
	ESD_DS_ORIGIN_AVAZU = 2,         /* converted from Avazu CSV */
	ESD_DS_ORIGIN_CRITEO_SEARCH = 3, /* converted from Criteo Sponsored Search TSV */
	ESD_DS_ORIGIN_OTHER = 4,         /* written by another program */
};

/*
 * Description of a stream: what a writer is given and what a reader reports.
 * rows[] and zipf[] have ntables entries.
 */
struct esd_ds_info {
	char shape[ESD_DS_NAME_LEN];      /* "criteo-kaggle", "avazu", "criteo-search", ... */
	uint32_t ntables;                 /* 1 .. ESD_DS_MAX_TABLES */
	uint32_t ndense;                  /* 0 .. ESD_DS_MAX_DENSE */
	uint64_t rows[ESD_DS_MAX_TABLES]; /* cardinality per table, 1 .. ESD_DS_MAX_ROWS */
	uint32_t dense_format;            /* enum esd_ds_dense_format */
	uint32_t block_samples;           /* samples per block; 0 = ESD_DS_BLOCK_SAMPLES */
	int32_t zstd_level;               /* 0 = uncompressed blocks, 1..19 = zstd level */
	uint64_t nsamples;                /* reader: samples in the file (writer ignores) */
	/* Provenance: recorded, never interpreted by the reader. */
	uint32_t origin;                /* enum esd_ds_origin */
	uint64_t seed;                  /* generator seed */
	double zipf[ESD_DS_MAX_TABLES]; /* generator Zipf exponent per table (0: n/a) */
	/* IDs per sample of table t: 0 or 1, one ID (a stream of such tables
	 * only is version 1); above 1, a bag of 0..max_bag[t] IDs (version 2,
	 * docs/multihot.md), read with esd_ds_read_bags. */
	uint32_t max_bag[ESD_DS_MAX_TABLES];
	double drift;                   /* generator drift (ranks re-drawn per 1M samples) */
	double scale;                   /* cardinality divisor applied (1: none) */
	uint64_t max_rows;              /* per-table cap applied (0: none) */
	uint64_t skipped;               /* converter: bad lines skipped */
	char source[ESD_DS_SOURCE_LEN]; /* free text: input file name, tool version */
	/* Feature name of each table ("C1", "site_id"): every entry empty (a
	 * stream without names, the header's flag bit 1 clear) or every one
	 * set, unique, 1..31 bytes of [A-Za-z0-9_.:-] (esd_ds_check_name). */
	char names[ESD_DS_MAX_TABLES][ESD_DS_NAME_LEN];
	/* 1: every ID carries a finite f32 weight (weighted bags, the header's
	 * flag bit 2, docs/multihot.md); a weighted stream has a bag table. */
	uint32_t weighted;
};

/* 1 when the stream's tables are named (names[0] set), else 0. */
int esd_ds_has_names(const struct esd_ds_info *info);
/*
 * Table t's feature name: the stream's own (names[t]), else a built-in
 * shape's column ("C1" for criteo-kaggle), else "t<t>". buf (at least
 * ESD_DS_NAME_LEN bytes) holds it; returns buf.
 */
const char *esd_ds_table_name(const struct esd_ds_info *info, uint32_t t, char *buf);
/*
 * Set info->names from a comma-separated list of exactly ntables names
 * ("C1,C2,..."); "" or NULL clears them. Returns 0, or -EINVAL with why
 * naming the bad name and its place (too long, a character outside
 * [A-Za-z0-9_.:-], a repeat, a count other than ntables).
 */
int esd_ds_set_names(struct esd_ds_info *info, const char *list, char *why, size_t whylen);
/* Set info->names to the built-in shape's columns (0), or -ENOENT. */
int esd_ds_shape_names(struct esd_ds_info *info, const char *shape);

/* Most keys one sample of the stream can carry: the sum over tables of
 * max(1, max_bag[t]) (ntables for a stream without bags). What a cache or
 * an exchange area sized for m samples must hold m times. */
uint32_t esd_ds_keys_per_sample(const struct esd_ds_info *info);
/* 1 when some table has bags (max_bag[t] > 1), else 0. */
int esd_ds_has_bags(const struct esd_ds_info *info);

/* ---- built-in shapes ------------------------------------------------------ */

/*
 * The shapes of the three public datasets: name ("criteo-kaggle", "avazu",
 * "criteo-search"), tables with their cardinalities, dense count. Fills
 * shape, ntables, ndense and rows of *info (other fields untouched).
 * Returns 0 or -ENOENT for an unknown name.
 */
int esd_ds_shape(const char *name, struct esd_ds_info *info);
/* Name of the i-th built-in shape (0, 1, 2), NULL past the end. */
const char *esd_ds_shape_name(unsigned i);
/* Column name of table t of a built-in shape ("C1", "site_id", ...) or NULL. */
const char *esd_ds_shape_table_name(const char *shape, uint32_t t);

/*
 * Shrink the cardinalities of *info for small machines: rows = ceil(rows /
 * scale), then at most max_rows (0: no cap), never below 1. Records scale
 * and max_rows in *info. Returns 0 or -EINVAL (scale < 1 or not finite).
 */
int esd_ds_scale_rows(struct esd_ds_info *info, double scale, uint64_t max_rows);

/* ---- writer ---------------------------------------------------------------- */

struct esd_ds_writer;

/*
 * Create (truncate) the file at path and start a stream described by
 * *info (copied; nsamples is ignored). The path must be a regular file
 * (the header is completed in place on close).
 * Returns 0 and *out, or -EINVAL (a field out of range), -ENOTSUP
 * (zstd_level > 0 in a build without zstd), -ENOMEM, or the -errno of
 * open(2). The caller owns *out and ends it with esd_ds_writer_close() or
 * esd_ds_writer_discard().
 */
int esd_ds_writer_open(const char *path, const struct esd_ds_info *info,
                       struct esd_ds_writer **out);

/*
 * Append one sample: label (0 or 1), dense[ndense] (may be NULL when
 * ndense is 0), ids[ntables] with ids[t] < rows[t].
 * Returns 0, -ERANGE (an ID at or above its table's cardinality, or a
 * label not 0/1; nothing is written), or -errno of a failed write.
 */
int esd_ds_writer_append(struct esd_ds_writer *w, uint8_t label, const float *dense,
                         const uint64_t *ids);

/*
 * Append one sample of a stream with bags: lens[ntables] IDs per table
 * (exactly 1 for a table whose max_bag is 0 or 1, 0..max_bag[t] for a bag
 * table), ids[] the tables' IDs concatenated in table order. Returns 0,
 * -ERANGE (a length or ID out of range, a label not 0/1; nothing is
 * written), or -errno of a failed write. esd_ds_writer_append is this
 * with every length 1.
 */
int esd_ds_writer_append_bags(struct esd_ds_writer *w, uint8_t label, const float *dense,
                              const uint32_t *lens, const uint64_t *ids);

/*
 * The same with a weight per ID: weights[] parallel to ids[] (NULL: every
 * weight 1). A stream opened with info->weighted stores them; another
 * refuses weights other than 1 (-EINVAL). Returns as esd_ds_writer_append_bags,
 * or -ERANGE for a weight that is not finite (naming sample and table).
 */
int esd_ds_writer_append_weighted(struct esd_ds_writer *w, uint8_t label, const float *dense,
                                  const uint32_t *lens, const uint64_t *ids,
                                  const float *weights);

/* Samples appended so far. */
uint64_t esd_ds_writer_count(const struct esd_ds_writer *w);

/*
 * Flush the last block, write the index, complete the header, fsync
 * nothing (callers that need durability fsync the file), close and free.
 * The header's max_bag of a bag table comes down to the longest bag
 * written (at least 2) where that keeps its lengths' width (u8 below 256,
 * else u16): readers, and the runtime's caches sized by
 * esd_ds_keys_per_sample, see the bags the file has, not the writer's
 * bound (convert's --max-bag 64, gen's 4 x MEAN).
 * Returns 0 or -errno of a failed write (the file is then incomplete and
 * readers refuse it). Accepts NULL (returns 0).
 */
int esd_ds_writer_close(struct esd_ds_writer *w);

/* Abandon the stream: close, unlink the file, free. Accepts NULL. */
void esd_ds_writer_discard(struct esd_ds_writer *w);

/* ---- reader ---------------------------------------------------------------- */

struct esd_ds_reader;

/*
 * Open a stream for reading: checks the header (magic, version, checksum,
 * ranges), the block index and the file size; block payloads are checked
 * when they are read. The cursor starts at sample 0.
 * Returns 0 and *out, or -ESD_EBADMAGIC (not a dataset stream),
 * -ESD_EBADVERSION, -ESD_EBADSUM (header or index checksum), -EPROTO
 * (truncated, incomplete or inconsistent file), -ENOTSUP (zstd blocks, a
 * build without zstd), -ENOMEM, or the -errno of open(2)/pread(2). The
 * caller owns *out; free it with esd_ds_close().
 */
int esd_ds_open(const char *path, struct esd_ds_reader **out);

/* The stream's description (owned by the reader, valid until close). */
const struct esd_ds_info *esd_ds_reader_info(const struct esd_ds_reader *r);

/*
 * Read up to k samples from the cursor into caller arrays and advance the
 * cursor: labels[k] (float 0/1), dense[k * ndense], keys[k * ntables]
 * (esd_key_make(table, id)). Any of the three may be NULL to skip it.
 * Returns the number of samples read (0 at the end of the stream, fewer
 * than k only at the end; for another epoch, esd_ds_rewind), or -ESD_EBADSUM / -EPROTO (a corrupt block; the
 * message names file, block and byte offset; the cursor is left where it
 * was, so nothing is returned twice), -ENOMEM, -errno of pread(2).
 */
int64_t esd_ds_read(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                    esd_key_t *keys);

/*
 * The same for any stream, bags included: keys of up to k samples, sample
 * by sample, table by table, each bag's IDs in file order, into
 * keys[keys_cap]; bag_off[k * ntables + 1] gets each (sample, table)
 * bag's start in keys (bag_off[0] = 0, bag_off[got * ntables] = the keys
 * written). Stops before a sample whose keys would not fit. Returns the
 * samples read, or the errors of esd_ds_read, or -ENOSPC (not even the
 * first sample's keys fit). esd_ds_read refuses a stream with bags
 * (-ENOTSUP, naming the table): it hands out one key per table.
 */
int64_t esd_ds_read_bags(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                         esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off);

/*
 * Exactly k samples from the cursor, starting over at sample 0 at the end
 * of the stream (epochs), bags included, as esd_ds_read_bags gives them
 * (bag_off[k * ntables + 1] relative to keys[0]); labels and dense may be
 * NULL. What a training job reads per global batch. Returns 0, -ENODATA
 * (a stream without samples), or the errors of esd_ds_read_bags.
 */
int esd_ds_read_wrap(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                     esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off);

/*
 * esd_ds_read_bags and esd_ds_read_wrap with each key's weight into
 * weights[keys_cap] (parallel to keys; 1 for every key of an unweighted
 * stream); weights may be NULL.
 */
int64_t esd_ds_read_bags_w(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                           esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off,
                           float *weights);
int esd_ds_read_wrap_w(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                       esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off, float *weights);

/* The cursor: index of the next sample esd_ds_read returns. */
uint64_t esd_ds_tell(const struct esd_ds_reader *r);

/*
 * Move the cursor to sample index cursor (0 .. nsamples; nsamples means
 * the end). Returns 0 or -EINVAL (past the end). Cheap: the block is read
 * on the next esd_ds_read.
 */
int esd_ds_seek(struct esd_ds_reader *r, uint64_t cursor);

/* esd_ds_seek(r, 0). */
void esd_ds_rewind(struct esd_ds_reader *r);

/*
 * The stream's content digest: xxh64 of the header's checksum and every
 * block's checksum in order (they cover every byte a reader returns, and
 * readers verify them), so two files with the same samples and header
 * have the same digest. Reads 40 bytes per block, not the payloads.
 * Returns 0 and *out, or the -errno of pread(2) (message kept).
 */
int esd_ds_digest(struct esd_ds_reader *r, uint64_t *out);

/* The path the reader was opened with. */
const char *esd_ds_path(const struct esd_ds_reader *r);

/* Close and free. Accepts NULL. */
void esd_ds_close(struct esd_ds_reader *r);

/*
 * The last error message of this thread's dataset calls ("file.esd: block
 * 3 at byte 65600: checksum mismatch"), "" if none. Static per thread;
 * valid until the next failing call of this thread.
 */
const char *esd_ds_last_error(void);

/* ---- hot-row files (FAE's static hot set) ------------------------------------ */

/*
 * The count most frequent keys of the first limit samples (0: all) of the
 * stream at path, ties to the smaller key, returned ascending in a
 * malloc'd *keys (*n <= count: never a key the profile did not see);
 * *samples (may be NULL) gets the samples read. Memory: 4 bytes per row
 * of every table. Returns 0 or -errno (message in esd_ds_last_error).
 */
int esd_ds_hot_profile(const char *path, uint64_t limit, uint64_t count, esd_key_t **keys,
                       uint64_t *n, uint64_t *samples);

/* Write keys (ascending, distinct) as a hot-row file: a first line
 * "# esd hot rows v1", an optional comment line, then TABLE:ID per line;
 * written to path.tmp and renamed. Returns 0 or -errno. */
int esd_ds_hot_write(const char *path, const esd_key_t *keys, uint64_t n, const char *comment);

/* Read a hot-row file into a malloc'd *keys (ascending). A missing first
 * line, a malformed, repeated or out-of-order key is refused with file and
 * line in esd_ds_last_error. Returns 0 or -errno. */
int esd_ds_hot_load(const char *path, esd_key_t **keys, uint64_t *n);

/* ---- generator ------------------------------------------------------------- */

/*
 * Parameters of a synthetic stream. Defaults (esd_ds_gen_defaults): the
 * "criteo-kaggle" shape, 1,000,000 samples, seed 1, Zipf exponent 1.2 on
 * every table, drift 0.1, scale 1, no row cap, f32 dense, no zstd
 * (docs/dataset.md says why).
 *
 * Skew: IDs of table t are Zipf(s_t)-distributed over its rows, popularity
 * rank r mapped to an ID by a per-table pseudo-random permutation.
 * Drift: per 1,000,000 samples, a fraction drift of each table's ranks
 * gets a new ID (random transpositions of ranks), so a hot ID is replaced
 * by a cold one at the same rate at every rank; popularity halves in
 * about 0.69 / drift million samples (7M at 0.1, about a day of Criteo
 * traffic). Drift keeps one u32 per row in memory while generating, and
 * needs tables below 2^32 rows.
 */
struct esd_ds_gen_params {
	struct esd_ds_info info; /* shape, rows (scaled), zipf[], drift, seed, formats;
	                          * max_bag[t] > 1: table t has bags */
	uint64_t nsamples;
	/* bag tables: a sample's bag length is Poisson(bag_mean[t]) capped at
	 * max_bag[t] (0 IDs: the feature is missing), its IDs drawn
	 * independently from the table's Zipf */
	double bag_mean[ESD_DS_MAX_TABLES];
};

/* Fill *p with the defaults for a built-in shape. Returns 0 or -ENOENT. */
int esd_ds_gen_defaults(struct esd_ds_gen_params *p, const char *shape);

/*
 * Write a synthetic stream of p->nsamples samples to path. The same
 * parameters give the same file, byte for byte.
 * Returns 0 or an error of esd_ds_writer_open/append/close, -EINVAL
 * (zipf exponent not in (0, 10], drift < 0).
 */
int esd_ds_generate(const struct esd_ds_gen_params *p, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* ESD_DATASET_H */
