/*
 * parse.h - line parsers of the real dataset formats (private to esd_data;
 * the converter and the fuzz targets use them). A parser takes one line
 * (no terminating newline needed, a trailing '\r' is ignored, the bytes
 * need not be NUL-terminated), fills a sample and returns 0, or returns
 * -EINVAL with a one-line reason ("field 15: 'xyz' is not hex").
 *
 * Categorical values become IDs by hashing: an empty value (or "-1" in the
 * Sponsored Search log) is ID 0; any other value v of table t is
 * 1 + xxh64(v, seed t + 1) mod (rows[t] - 1) (0 when the table has one row).
 * tsv-multi-hot hashes each hex ID of a bag the same way (an empty field
 * is an empty bag, not ID 0).
 */
#ifndef ESD_DATA_PARSE_H
#define ESD_DATA_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <esd/dataset.h>

enum ds_format {
	DS_FMT_CRITEO = 0,    /* Criteo Kaggle TSV: label, I1..I13, C1..C26 */
	DS_FMT_AVAZU = 1,     /* Avazu CSV with its header line */
	DS_FMT_SEARCH = 2,    /* Criteo Sponsored Search conversion log TSV */
	DS_FMT_MULTI_HOT = 3, /* tsv-multi-hot: label, dense, one bag of hex IDs per table */
};

#define DS_AVAZU_MAX_COLS 64

struct ds_parse_ctx {
	enum ds_format fmt;
	uint32_t ntables;
	uint32_t ndense;
	uint64_t rows[ESD_DS_MAX_TABLES];
	/* Avazu: columns found in the header line */
	int ncols;                        /* columns per line */
	int click_col;                    /* column of the label */
	int table_col[ESD_DS_MAX_TABLES]; /* column of each table */
	/* tsv-multi-hot: the separator of a bag's IDs, each table's bag bound */
	char sep;
	uint32_t max_bag[ESD_DS_MAX_TABLES];
	/* tsv-multi-hot --weighted: an ID may carry a weight, "id:weight" */
	int weighted;
};

struct ds_sample {
	uint8_t label;
	float dense[ESD_DS_MAX_DENSE];
	uint64_t ids[ESD_DS_MAX_TABLES];
	/* tsv-multi-hot: IDs per table, and the bags' IDs concatenated in table
	 * order into bag_ids[bag_cap] (the caller's array; a line with more IDs
	 * is refused) */
	uint32_t lens[ESD_DS_MAX_TABLES];
	uint64_t *bag_ids;
	size_t bag_cap;
	/* --weighted: each bag ID's weight (1 where the line gives none),
	 * parallel to bag_ids[bag_cap] (the caller's array) */
	float *bag_wts;
};

/* Name of a format ("criteo-kaggle", "avazu", "criteo-search",
 * "tsv-multi-hot") to enum; returns 0 or -ENOENT. */
int esd_ds_format_parse(const char *name, enum ds_format *out);
/* The built-in shape (esd_ds_shape) of a real-file format: criteo-kaggle,
 * avazu or criteo-search (tsv-multi-hot has none: criteo-kaggle). */
const char *esd_ds_format_shape(enum ds_format fmt);

/*
 * Set up a context for fmt with the built-in shape's tables; rows may be
 * NULL (the shape's cardinalities) or ntables entries. For Avazu the
 * header line must then go through esd_ds_parse_header before any data line.
 * tsv-multi-hot has no shape: this gives one table (rows[0] rows, or 1),
 * no dense value, bags of up to 64 IDs and ','; see esd_ds_parse_init_multi_hot.
 */
void esd_ds_parse_init(struct ds_parse_ctx *c, enum ds_format fmt, const uint64_t *rows);

/*
 * tsv-multi-hot has no built-in shape: ntables tables (1..ESD_DS_MAX_TABLES)
 * of rows[t] rows and bags of at most max_bag[t] IDs, ndense dense values
 * (0..ESD_DS_MAX_DENSE), sep between a bag's IDs (not a tab nor a hex digit).
 */
void esd_ds_parse_init_multi_hot(struct ds_parse_ctx *c, uint32_t ntables, uint32_t ndense,
                                 const uint64_t *rows, const uint32_t *max_bag, char sep);

/*
 * Avazu: map the header line's column names. Returns 0, or -EINVAL with a
 * reason (a column we need is missing, too many columns).
 */
int esd_ds_parse_header(struct ds_parse_ctx *c, const char *line, size_t len, char *why,
                        size_t whylen);

/* True when the line is the header of a Sponsored Search file ("Sale\t..."). */
int esd_ds_is_search_header(const char *line, size_t len);

/* Parse one data line. Returns 0 or -EINVAL with why filled. */
int esd_ds_parse_line(const struct ds_parse_ctx *c, const char *line, size_t len,
                      struct ds_sample *out, char *why, size_t whylen);

#endif /* ESD_DATA_PARSE_H */
