/*
 * convert.h - streaming conversion of the real dataset files into a
 * dataset stream (private to esd_data; esd-data convert is its front end).
 */
#ifndef ESD_DATA_CONVERT_H
#define ESD_DATA_CONVERT_H

#include <stdint.h>

#include "parse.h"

struct ds_convert_opts {
	enum ds_format fmt;
	const char *in_path; /* "-" reads stdin */
	const char *out_path;
	/* rows: nrows values, 1 (every table hashed into rows[0] rows) or one per
	 * table; nrows 0 = the shape's (tsv-multi-hot needs them) */
	uint64_t rows[ESD_DS_MAX_TABLES];
	uint32_t nrows;
	double scale;          /* cardinality divisor (>= 1) */
	uint64_t max_rows;     /* per-table cap, 0 = none */
	uint64_t limit;        /* stop after this many samples, 0 = all */
	int skip_bad;          /* skip and count bad lines instead of failing */
	int allow_empty;       /* write a stream of 0 samples (else -ENODATA) */
	int progress;          /* 1: progress bar on stderr */
	uint32_t dense_format; /* enum esd_ds_dense_format */
	int zstd_level;
	/* tsv-multi-hot: the shape (ntables 1.., ndense), each table's bag
	 * bound (2..ESD_DS_MAX_BAG; 0 = DS_DEFAULT_MAX_BAG) and the separator
	 * of a bag's IDs (0 = ',') */
	uint32_t ntables, ndense;
	uint32_t max_bag[ESD_DS_MAX_TABLES];
	char sep;
	/* Feature names: a comma-separated list, one a table (NULL: a built-in
	 * format's columns, none for tsv-multi-hot); header: tsv-multi-hot's
	 * first line names the fields (label, dense, tables) and is no sample. */
	const char *names;
	int header;
	/* tsv-multi-hot: a bag ID may carry a weight, "id:weight" (a weighted
	 * stream, docs/multihot.md) */
	int weighted;
};

/* tsv-multi-hot's bag bound when --max-bag is not given. */
#define DS_DEFAULT_MAX_BAG 64

struct ds_convert_result {
	uint64_t lines;   /* lines read (header included) */
	uint64_t samples; /* samples written */
	uint64_t skipped; /* bad lines skipped */
};

/* Longest line accepted; a longer one is a bad line. */
#define DS_MAX_LINE (1u << 20)

/*
 * Convert o->in_path into o->out_path. Returns 0, -ENODATA when no sample
 * came out (unless allow_empty; nothing written), or -EINVAL for bad
 * options (the rows, tsv-multi-hot's shape) or a bad line without skip_bad
 * (the message, via esd_ds_last_error, names the file and line), or an
 * error of the writer or of reading the input. On failure the output file
 * is removed.
 */
int esd_ds_convert(const struct ds_convert_opts *o, struct ds_convert_result *res);

#endif /* ESD_DATA_CONVERT_H */
