/*
 * info.c - the built-in dataset shapes (the public cardinalities of Criteo
 * Kaggle, our documented choice for Avazu and Criteo Sponsored Search),
 * cardinality scaling for small machines, range checks of a stream
 * description, and the per-thread last-error message of the library.
 */
#include "format.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include <esd/err.h>
#include <esd/log.h>

struct shape {
	const char *name;
	uint32_t ndense;
	uint32_t ntables;
	const char *const *cols;
	const uint64_t *rows;
};

/* Criteo Kaggle (Display Advertising Challenge), train.txt: C1..C26. */
static const char *const criteo_cols[] = {
    "C1",  "C2",  "C3",  "C4",  "C5",  "C6",  "C7",  "C8",  "C9",  "C10", "C11", "C12", "C13",
    "C14", "C15", "C16", "C17", "C18", "C19", "C20", "C21", "C22", "C23", "C24", "C25", "C26",
};
static const uint64_t criteo_rows[] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572,
};

/*
 * Avazu (Kaggle CTR prediction), train: distinct values per column over the
 * 40,428,967 training lines, from public analyses of the file. 18 of the 21
 * categorical columns: C1 (a coarser copy of device_type), C16 (banner
 * height, fixed by C15) and C17 (a grouping of C14) are dropped.
 */
static const char *const avazu_cols[] = {
    "banner_pos",   "site_id",   "site_domain", "site_category", "app_id",      "app_domain",
    "app_category", "device_id", "device_ip",   "device_model",  "device_type", "device_conn_type",
    "C14",          "C15",       "C18",         "C19",           "C20",         "C21",
};
static const uint64_t avazu_rows[] = {
    7, 4737, 7745, 26, 8552, 559, 36, 2686408, 6729486, 8251, 5, 4, 2626, 8, 4, 68, 172, 60,
};

/*
 * Criteo Sponsored Search Conversion Log: the 17 categorical columns.
 * Cardinalities are round estimates (no copy of the file here); convert
 * records the rows it used and stat measures the distinct IDs.
 */
static const char *const search_cols[] = {
    "product_age_group", "device_type",       "audience_id",       "product_gender",
    "product_brand",     "product_category1", "product_category2", "product_category3",
    "product_category4", "product_category5", "product_category6", "product_category7",
    "product_country",   "product_id",        "product_title",     "partner_id",
    "user_id",
};
static const uint64_t search_rows[] = {
    11,   10,  18000, 17, 56000,   21,     170, 1000,     1800,
    1500, 750, 40,    21, 1600000, 830000, 310, 10000000,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
_Static_assert(NELEM(criteo_cols) == 26 && NELEM(criteo_rows) == 26, "criteo: 26 tables");
_Static_assert(NELEM(avazu_cols) == 18 && NELEM(avazu_rows) == 18, "avazu: 18 tables");
_Static_assert(NELEM(search_cols) == 17 && NELEM(search_rows) == 17, "search: 17 tables");

static const struct shape shapes[] = {
    {"criteo-kaggle", 13, 26, criteo_cols, criteo_rows},
    {"avazu", 0, 18, avazu_cols, avazu_rows},
    {"criteo-search", 2, 17, search_cols, search_rows},
};

static const struct shape *find_shape(const char *name)
{
	for (size_t i = 0; name && i < NELEM(shapes); i++)
		if (!strcmp(shapes[i].name, name))
			return &shapes[i];
	return NULL;
}

int esd_ds_shape(const char *name, struct esd_ds_info *info)
{
	const struct shape *s = find_shape(name);
	if (!s)
		return esd_ds_fail(-ENOENT,
		                   "unknown dataset shape '%s' (criteo-kaggle, avazu, "
		                   "criteo-search)",
		                   name ? name : "(null)");
	snprintf(info->shape, sizeof(info->shape), "%s", s->name);
	info->ntables = s->ntables;
	info->ndense = s->ndense;
	for (uint32_t t = 0; t < s->ntables; t++)
		info->rows[t] = s->rows[t];
	return 0;
}

const char *esd_ds_shape_name(unsigned i)
{
	return i < NELEM(shapes) ? shapes[i].name : NULL;
}

const char *esd_ds_shape_table_name(const char *shape, uint32_t t)
{
	const struct shape *s = find_shape(shape);
	return s && t < s->ntables ? s->cols[t] : NULL;
}

int esd_ds_shape_names(struct esd_ds_info *info, const char *shape)
{
	const struct shape *s = find_shape(shape);
	if (!s || s->ntables != info->ntables)
		return -ENOENT;
	for (uint32_t t = 0; t < s->ntables; t++)
		snprintf(info->names[t], ESD_DS_NAME_LEN, "%s", s->cols[t]);
	return 0;
}

int esd_ds_has_names(const struct esd_ds_info *info)
{
	return info->names[0][0] != 0;
}

const char *esd_ds_table_name(const struct esd_ds_info *info, uint32_t t, char *buf)
{
	const char *col = esd_ds_shape_table_name(info->shape, t);
	if (t < info->ntables && info->names[t][0])
		snprintf(buf, ESD_DS_NAME_LEN, "%s", info->names[t]);
	else if (col)
		snprintf(buf, ESD_DS_NAME_LEN, "%s", col);
	else
		snprintf(buf, ESD_DS_NAME_LEN, "t%u", t);
	return buf;
}

/* Why name (len bytes) is not a feature name, or NULL. */
static const char *name_fault(const char *name, size_t len)
{
	if (len == 0)
		return "empty";
	if (len >= ESD_DS_NAME_LEN)
		return "longer than 31 bytes";
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == ':' || c == '-'))
			return "a character outside [A-Za-z0-9_.:-]";
	}
	return NULL;
}

/* The names' check: all empty, or all valid and unique. */
static int check_names(const struct esd_ds_info *in, char *why, size_t whylen)
{
	if (!in->names[0][0]) {
		for (uint32_t t = 1; t < in->ntables; t++)
			if (in->names[t][0]) {
				snprintf(why, whylen, "table %u named, table 0 not (all or none)", t);
				return -EINVAL;
			}
		return 0;
	}
	for (uint32_t t = 0; t < in->ntables; t++) {
		const char *n = in->names[t];
		const char *bad = name_fault(n, strnlen(n, ESD_DS_NAME_LEN));
		if (bad) {
			snprintf(why, whylen, "table %u: name '%.31s': %s", t, n, bad);
			return -EINVAL;
		}
		for (uint32_t u = 0; u < t; u++)
			if (!strcmp(in->names[u], n)) {
				snprintf(why, whylen, "table %u: name '%s' already names table %u", t,
				         n, u);
				return -EINVAL;
			}
	}
	return 0;
}

int esd_ds_set_names(struct esd_ds_info *info, const char *list, char *why, size_t whylen)
{
	struct esd_ds_info tmp;
	memset(tmp.names, 0, sizeof(tmp.names));
	tmp.ntables = info->ntables;
	uint32_t n = 0;
	for (const char *p = list; p && *p; n++) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *bad = name_fault(p, len);
		if (n < ESD_DS_MAX_TABLES && bad) {
			snprintf(why, whylen, "name %u '%.*s': %s", n + 1, (int)(len > 40 ? 40 : len),
			         p, bad);
			return -EINVAL;
		}
		if (n < ESD_DS_MAX_TABLES)
			memcpy(tmp.names[n], p, len);
		p = end ? end + 1 : p + len;
		if (end && !*p) {
			snprintf(why, whylen, "name %u: empty (a trailing ',')", n + 2);
			return -EINVAL;
		}
	}
	if (n && n != info->ntables) {
		snprintf(why, whylen, "%u names for %u tables", n, info->ntables);
		return -EINVAL;
	}
	int rc = check_names(&tmp, why, whylen);
	if (!rc)
		memcpy(info->names, tmp.names, sizeof(tmp.names));
	return rc;
}

int esd_ds_scale_rows(struct esd_ds_info *info, double scale, uint64_t max_rows)
{
	if (!isfinite(scale) || scale < 1.0)
		return esd_ds_fail(-EINVAL, "scale %g: must be a number >= 1", scale);
	for (uint32_t t = 0; t < info->ntables; t++) {
		double r = ceil((double)info->rows[t] / scale);
		uint64_t n = r < 1.0 ? 1 : (uint64_t)r;
		if (max_rows && n > max_rows)
			n = max_rows;
		info->rows[t] = n;
	}
	info->scale = scale;
	info->max_rows = max_rows;
	return 0;
}

int esd_ds_info_check(const struct esd_ds_info *in, char *why, size_t whylen)
{
	if (in->ntables < 1 || in->ntables > ESD_DS_MAX_TABLES) {
		snprintf(why, whylen, "ntables %u not in 1..%u", in->ntables, ESD_DS_MAX_TABLES);
		return -EINVAL;
	}
	if (in->ndense > ESD_DS_MAX_DENSE) {
		snprintf(why, whylen, "ndense %u above %u", in->ndense, ESD_DS_MAX_DENSE);
		return -EINVAL;
	}
	for (uint32_t t = 0; t < in->ntables; t++) {
		if (in->rows[t] < 1 || in->rows[t] > ESD_DS_MAX_ROWS) {
			snprintf(why, whylen, "table %u: %llu rows not in 1..2^48-1", t,
			         (unsigned long long)in->rows[t]);
			return -EINVAL;
		}
		if (in->max_bag[t] > ESD_DS_MAX_BAG) {
			snprintf(why, whylen, "table %u: bags of up to %u IDs, above %u", t,
			         in->max_bag[t], ESD_DS_MAX_BAG);
			return -EINVAL;
		}
	}
	if (in->weighted > 1 || (in->weighted && !has_bags(in))) {
		snprintf(why, whylen,
		         "weighted IDs need a bag table (max_bag above 1; weighted %u)",
		         in->weighted);
		return -EINVAL;
	}
	if (in->dense_format > ESD_DS_DENSE_BF16) {
		snprintf(why, whylen, "dense format %u unknown", in->dense_format);
		return -EINVAL;
	}
	if (in->block_samples > (1u << 20)) {
		snprintf(why, whylen, "block of %u samples above 2^20", in->block_samples);
		return -EINVAL;
	}
	uint64_t bs = in->block_samples ? in->block_samples : ESD_DS_BLOCK_SAMPLES;
	if (bs * sample_bytes(in) > (UINT64_C(1) << 30)) {
		snprintf(why, whylen, "a block of %llu samples exceeds 1 GiB",
		         (unsigned long long)bs);
		return -EINVAL;
	}
	if (in->zstd_level < 0 || in->zstd_level > 19) {
		snprintf(why, whylen, "zstd level %d not in 0..19", in->zstd_level);
		return -EINVAL;
	}
	if (memchr(in->shape, 0, sizeof(in->shape)) == NULL ||
	    memchr(in->source, 0, sizeof(in->source)) == NULL) {
		snprintf(why, whylen, "shape or source text not terminated");
		return -EINVAL;
	}
	return check_names(in, why, whylen);
}

static _Thread_local char last_error[512];

uint32_t esd_ds_keys_per_sample(const struct esd_ds_info *in)
{
	uint64_t w = 0;
	for (uint32_t t = 0; t < in->ntables; t++)
		w += is_bag(in, t) ? in->max_bag[t] : 1;
	return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

int esd_ds_has_bags(const struct esd_ds_info *in)
{
	return has_bags(in);
}

const char *esd_ds_last_error(void)
{
	return last_error;
}

int esd_ds_fail(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	ESD_ERR("data", "%s", last_error);
	return rc;
}
