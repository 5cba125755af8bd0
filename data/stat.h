/*
 * stat.h - statistics of a dataset stream (private to esd_data; esd-data
 * stat prints them): samples, distinct keys and skew per table, the share
 * of accesses a cache of a given ratio of all rows covers, and the bag
 * lengths of each multi-hot table.
 */
#ifndef ESD_DATA_STAT_H
#define ESD_DATA_STAT_H

#include <stdint.h>

#include <esd/dataset.h>

/* Power-of-two buckets of bag lengths: 0, 1, 2-3, 4-7, ..., 32768-65535. */
#define DS_BAG_BUCKETS 17

struct ds_table_stat {
	uint64_t rows;      /* cardinality from the header */
	uint64_t distinct;  /* IDs seen at least once */
	uint64_t top_count; /* accesses of the most frequent ID */
	double top1_share;  /* accesses covered by the top 1 % of rows (at least 1 row) */
	double zipf_fit;    /* fitted exponent of the rank-frequency head; NAN if too few points */
	double cache_cover; /* accesses covered by the top cache_ratio * rows IDs of this table */
	/* bag tables (max_bag > 1): the bag lengths of the samples read; the
	 * quantiles are nearest-rank (the smallest length that at least that
	 * share of the bags does not exceed) */
	uint32_t bag_min, bag_p50, bag_p90, bag_p99, bag_max;
	double bag_mean;
	uint64_t bag_hist[DS_BAG_BUCKETS]; /* [0] empty bags, [b] lengths 2^(b-1)..2^b-1 */
	/* a weighted stream: the weights of the IDs read (0 when none) */
	double wt_min, wt_mean, wt_max;
	uint64_t wt_n;
};

struct ds_stat {
	struct esd_ds_info info;
	uint64_t samples;    /* samples read (all, or the limit) */
	uint64_t positives;  /* samples labelled 1 */
	uint64_t total_rows; /* sum of rows */
	uint64_t distinct;   /* sum of distinct */
	double cache_ratio;
	uint64_t cache_rows; /* floor(cache_ratio * total_rows) */
	double cache_cover;  /* accesses covered by the cache_rows most frequent keys overall */
	uint64_t digest;     /* esd_ds_digest: compare copies on several hosts */
	struct ds_table_stat t[ESD_DS_MAX_TABLES];
};

/* Most rows (sum over tables) stat will count: 4 bytes each. */
#define DS_STAT_MAX_ROWS (UINT64_C(1) << 31)

/*
 * Read the stream at path (the first limit samples; 0 = all) and fill *st.
 * Memory: 4 bytes per row of every table. Returns 0, -EINVAL (cache_ratio
 * not in [0, 1]), -ENOMEM (more than DS_STAT_MAX_ROWS rows: scale the
 * stream), or an error of esd_ds_open/esd_ds_read.
 */
int esd_ds_stat_compute(const char *path, double cache_ratio, uint64_t limit, struct ds_stat *st);

/* Add the accesses of the first limit samples (0: all) from r's position
 * to cnt[t][id] (one array of rows[t] counters per table, saturating) and,
 * when lens is not NULL, each bag of table t to lens[t][length] (an array
 * of max_bag[t] + 1 counters, or NULL for a table not counted).
 * Returns 0 or an error of esd_ds_read. */
int esd_ds_count_accesses(struct esd_ds_reader *r, uint64_t limit, uint32_t *const *cnt,
                          uint64_t *const *lens, uint64_t *samples, uint64_t *positives);

/* Bucket of a bag length in ds_table_stat.bag_hist. */
unsigned esd_ds_bag_bucket(uint32_t len);

#endif /* ESD_DATA_STAT_H */
