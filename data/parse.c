/*
 * parse.c - line parsers for Criteo Kaggle TSV, Avazu CSV, the Criteo
 * Sponsored Search conversion log and tsv-multi-hot (label, dense values,
 * one bag of hex IDs per table). They see untrusted bytes (the fuzz
 * targets call them directly): every field is bounded by the line length,
 * numbers are parsed by hand or from a bounded copy, and every failure
 * says which field and why.
 */
#include "parse.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define CRITEO_FIELDS 40 /* label, 13 integers, 26 categorical */
#define SEARCH_FIELDS 23 /* Sale .. user_id */
#define SEARCH_CAT0   6  /* first categorical column */
#define MH_MAX_FIELDS (1 + ESD_DS_MAX_DENSE + ESD_DS_MAX_TABLES)
#define MH_MAX_BAG    64 /* esd_ds_parse_init's default bag bound */

struct field {
	const char *p;
	size_t n;
};

int esd_ds_format_parse(const char *name, enum ds_format *out)
{
	if (!strcmp(name, "criteo-kaggle") || !strcmp(name, "criteo"))
		*out = DS_FMT_CRITEO;
	else if (!strcmp(name, "avazu"))
		*out = DS_FMT_AVAZU;
	else if (!strcmp(name, "criteo-search") || !strcmp(name, "search"))
		*out = DS_FMT_SEARCH;
	else if (!strcmp(name, "tsv-multi-hot"))
		*out = DS_FMT_MULTI_HOT;
	else
		return -ENOENT;
	return 0;
}

const char *esd_ds_format_shape(enum ds_format fmt)
{
	return fmt == DS_FMT_AVAZU    ? "avazu"
	       : fmt == DS_FMT_SEARCH ? "criteo-search"
	                              : "criteo-kaggle";
}

void esd_ds_parse_init_multi_hot(struct ds_parse_ctx *c, uint32_t ntables, uint32_t ndense,
                                 const uint64_t *rows, const uint32_t *max_bag, char sep)
{
	memset(c, 0, sizeof(*c));
	c->fmt = DS_FMT_MULTI_HOT;
	c->ntables = ntables < ESD_DS_MAX_TABLES ? ntables : ESD_DS_MAX_TABLES;
	c->ndense = ndense < ESD_DS_MAX_DENSE ? ndense : ESD_DS_MAX_DENSE;
	for (uint32_t t = 0; t < c->ntables; t++) {
		c->rows[t] = rows[t];
		c->max_bag[t] = max_bag[t];
	}
	c->ncols = (int)(1 + c->ndense + c->ntables);
	c->click_col = 0;
	c->sep = sep;
}

void esd_ds_parse_init(struct ds_parse_ctx *c, enum ds_format fmt, const uint64_t *rows)
{
	struct esd_ds_info in;
	if (fmt == DS_FMT_MULTI_HOT) {
		static const uint32_t max_bag = MH_MAX_BAG;
		uint64_t one = rows ? rows[0] : 1;
		esd_ds_parse_init_multi_hot(c, 1, 0, &one, &max_bag, ',');
		return;
	}
	memset(c, 0, sizeof(*c));
	memset(&in, 0, sizeof(in));
	esd_ds_shape(esd_ds_format_shape(fmt), &in);
	c->fmt = fmt;
	c->ntables = in.ntables;
	c->ndense = in.ndense;
	for (uint32_t t = 0; t < in.ntables; t++)
		c->rows[t] = rows ? rows[t] : in.rows[t];
	c->ncols = fmt == DS_FMT_CRITEO ? CRITEO_FIELDS : fmt == DS_FMT_SEARCH ? SEARCH_FIELDS : 0;
	c->click_col = -1;
}

/* Split at sep into at most max fields; returns the count (max + 1 means
 * "more than max"). A trailing '\r' is dropped. */
static int split(const char *line, size_t len, char sep, struct field *f, int max)
{
	if (len && line[len - 1] == '\r')
		len--;
	int n = 0;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || line[i] == sep) {
			if (n == max)
				return max + 1;
			f[n].p = line + start;
			f[n].n = i - start;
			n++;
			start = i + 1;
		}
	}
	return n;
}

/* Quote a field for a message: at most 24 bytes, non-printables as '?'. */
static const char *show(const struct field *f, char *buf, size_t cap)
{
	size_t n = f->n < 24 ? f->n : 24;
	if (n + 4 > cap)
		n = cap - 4;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)f->p[i];
		buf[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	if (f->n > n) {
		buf[o++] = '.';
		buf[o++] = '.';
	}
	buf[o] = 0;
	return buf;
}

static int bad(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int parse_label(const struct field *f, uint8_t *out)
{
	if (f->n == 1 && (f->p[0] == '0' || f->p[0] == '1')) {
		*out = (uint8_t)(f->p[0] - '0');
		return 0;
	}
	return -EINVAL;
}

/* Optional sign and 1..18 digits (no overflow possible). */
static int parse_int(const struct field *f, int64_t *out)
{
	size_t i = 0;
	int neg = 0;
	if (f->n && (f->p[0] == '-' || f->p[0] == '+')) {
		neg = f->p[0] == '-';
		i = 1;
	}
	if (i == f->n || f->n - i > 18)
		return -EINVAL;
	int64_t v = 0;
	for (; i < f->n; i++) {
		if (f->p[i] < '0' || f->p[i] > '9')
			return -EINVAL;
		v = v * 10 + (f->p[i] - '0');
	}
	*out = neg ? -v : v;
	return 0;
}

/* A decimal number ("12", "-1", "0.5", "1e3"): bounded copy, strtod. */
static int parse_num(const struct field *f, double *out)
{
	char buf[40];
	if (f->n == 0 || f->n >= sizeof(buf))
		return -EINVAL;
	for (size_t i = 0; i < f->n; i++) {
		char ch = f->p[i];
		if (!((ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' ||
		      ch == 'e' || ch == 'E'))
			return -EINVAL;
	}
	memcpy(buf, f->p, f->n);
	buf[f->n] = 0;
	char *end;
	double v = strtod(buf, &end);
	if (*end || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

/* DLRM's transform of a count: log(1 + x), negatives clamped to 0. */
static float dense_of(double x)
{
	return (float)log1p(x > 0.0 ? x : 0.0);
}

static uint64_t hash_id(const struct ds_parse_ctx *c, uint32_t t, const struct field *f)
{
	if (f->n == 0 || c->rows[t] <= 1)
		return 0;
	return 1 + XXH64(f->p, f->n, (uint64_t)t + 1) % (c->rows[t] - 1);
}

static int is_hex(const struct field *f)
{
	if (f->n > 16)
		return 0;
	for (size_t i = 0; i < f->n; i++) {
		char ch = f->p[i];
		if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
		      (ch >= 'A' && ch <= 'F')))
			return 0;
	}
	return 1;
}

static int parse_criteo(const struct ds_parse_ctx *c, const char *line, size_t len,
                        struct ds_sample *s, char *why, size_t whylen)
{
	struct field f[CRITEO_FIELDS];
	char q[32];
	int n = split(line, len, '\t', f, CRITEO_FIELDS);
	if (n != CRITEO_FIELDS)
		return bad(why, whylen,
		           "%s%d tab-separated fields, expected 40 (label, 13 "
		           "integers, 26 hex IDs)",
		           n > CRITEO_FIELDS ? "more than " : "",
		           n > CRITEO_FIELDS ? CRITEO_FIELDS : n);
	if (parse_label(&f[0], &s->label))
		return bad(why, whylen, "field 1 (label): '%s' is not 0 or 1",
		           show(&f[0], q, sizeof(q)));
	for (int j = 0; j < 13; j++) {
		int64_t v = 0;
		if (f[1 + j].n && parse_int(&f[1 + j], &v))
			return bad(why, whylen, "field %d (I%d): '%s' is not an integer", j + 2,
			           j + 1, show(&f[1 + j], q, sizeof(q)));
		s->dense[j] = dense_of((double)v);
	}
	for (uint32_t t = 0; t < 26; t++) {
		const struct field *fc = &f[14 + t];
		if (!is_hex(fc))
			return bad(why, whylen, "field %u (C%u): '%s' is not a hex ID", 15 + t,
			           t + 1, show(fc, q, sizeof(q)));
		s->ids[t] = hash_id(c, t, fc);
	}
	return 0;
}

static int parse_avazu(const struct ds_parse_ctx *c, const char *line, size_t len,
                       struct ds_sample *s, char *why, size_t whylen)
{
	struct field f[DS_AVAZU_MAX_COLS];
	char q[32];
	if (c->ncols <= 0)
		return bad(why, whylen, "no header line seen");
	int n = split(line, len, ',', f, c->ncols);
	if (n != c->ncols)
		return bad(why, whylen, "%s%d comma-separated fields, the header has %d",
		           n > c->ncols ? "more than " : "", n > c->ncols ? c->ncols : n, c->ncols);
	if (parse_label(&f[c->click_col], &s->label))
		return bad(why, whylen, "field %d (click): '%s' is not 0 or 1", c->click_col + 1,
		           show(&f[c->click_col], q, sizeof(q)));
	for (uint32_t t = 0; t < c->ntables; t++)
		s->ids[t] = hash_id(c, t, &f[c->table_col[t]]);
	return 0;
}

int esd_ds_parse_header(struct ds_parse_ctx *c, const char *line, size_t len, char *why,
                        size_t whylen)
{
	struct field f[DS_AVAZU_MAX_COLS];
	c->ncols = 0; /* no data line parses until a header did */
	int n = split(line, len, ',', f, DS_AVAZU_MAX_COLS);
	if (n > DS_AVAZU_MAX_COLS)
		return bad(why, whylen, "header: more than %d columns", DS_AVAZU_MAX_COLS);
	c->click_col = -1;
	for (uint32_t t = 0; t < c->ntables; t++)
		c->table_col[t] = -1;
	for (int i = 0; i < n; i++) {
		if (f[i].n == 5 && !memcmp(f[i].p, "click", 5))
			c->click_col = i;
		for (uint32_t t = 0; t < c->ntables; t++) {
			const char *name = esd_ds_shape_table_name("avazu", t);
			if (strlen(name) == f[i].n && !memcmp(name, f[i].p, f[i].n))
				c->table_col[t] = i;
		}
	}
	if (c->click_col < 0)
		return bad(why, whylen, "header: no 'click' column (the test file has no labels)");
	for (uint32_t t = 0; t < c->ntables; t++)
		if (c->table_col[t] < 0)
			return bad(why, whylen, "header: no '%s' column",
			           esd_ds_shape_table_name("avazu", t));
	c->ncols = n;
	return 0;
}

int esd_ds_is_search_header(const char *line, size_t len)
{
	return len >= 5 && !memcmp(line, "Sale\t", 5);
}

static int parse_search(const struct ds_parse_ctx *c, const char *line, size_t len,
                        struct ds_sample *s, char *why, size_t whylen)
{
	static const char *const num_names[] = {"SalesAmountInEuro", "time_delay_for_conversion",
	                                        "click_timestamp", "nb_clicks_1week",
	                                        "product_price"};
	struct field f[SEARCH_FIELDS];
	char q[32];
	int n = split(line, len, '\t', f, SEARCH_FIELDS);
	if (n != SEARCH_FIELDS)
		return bad(why, whylen,
		           "%s%d tab-separated fields, expected 23 (Sale, 5 numbers, "
		           "17 categorical)",
		           n > SEARCH_FIELDS ? "more than " : "",
		           n > SEARCH_FIELDS ? SEARCH_FIELDS : n);
	if (parse_label(&f[0], &s->label))
		return bad(why, whylen, "field 1 (Sale): '%s' is not 0 or 1",
		           show(&f[0], q, sizeof(q)));
	double v[5];
	for (int j = 0; j < 5; j++) {
		if (parse_num(&f[1 + j], &v[j]))
			return bad(why, whylen, "field %d (%s): '%s' is not a number", j + 2,
			           num_names[j], show(&f[1 + j], q, sizeof(q)));
	}
	s->dense[0] = dense_of(v[3]); /* nb_clicks_1week, -1 = unknown */
	s->dense[1] = dense_of(v[4]); /* product_price */
	for (uint32_t t = 0; t < c->ntables; t++) {
		struct field fc = f[SEARCH_CAT0 + t];
		if (fc.n == 2 && fc.p[0] == '-' && fc.p[1] == '1')
			fc.n = 0; /* the log's "missing" */
		s->ids[t] = hash_id(c, t, &fc);
	}
	return 0;
}

/* The IDs of a bag field, one more than its separators (0 when empty). */
static uint32_t bag_count(const struct field *f, char sep)
{
	uint32_t n = f->n ? 1 : 0;
	for (size_t i = 0; i < f->n; i++)
		n += f->p[i] == sep;
	return n;
}

/* A bag member "id:weight" (--weighted): cut id at the ':' and parse the
 * weight (a finite number, as a float) into *w; no ':' gives weight 1. */
static int split_weight(const struct ds_parse_ctx *c, uint32_t t, int fno, uint32_t j,
                        struct field *id, float *w, char *why, size_t whylen)
{
	char q[32];
	const char *colon = memchr(id->p, ':', id->n);
	if (!colon) {
		if (w)
			*w = 1.0f;
		return 0;
	}
	if (!c->weighted || !w)
		return bad(why, whylen,
		           "field %d (table %u): '%s' (ID %u of the bag) has a weight; "
		           "convert with --weighted",
		           fno, t, show(id, q, sizeof(q)), j + 1);
	struct field wf = {colon + 1, id->n - (size_t)(colon + 1 - id->p)};
	double v = 0;
	if (wf.n == 0 || parse_num(&wf, &v) || !isfinite((float)v))
		return bad(why, whylen,
		           "field %d (table %u): '%s' (ID %u of the bag): the weight is not a "
		           "finite number",
		           fno, t, show(id, q, sizeof(q)), j + 1);
	*w = (float)v;
	id->n = (size_t)(colon - id->p);
	return 0;
}

/* Field fno (1-based), table t's bag: its hex IDs hashed into bag_ids from
 * *k on. */
static int parse_bag(const struct ds_parse_ctx *c, uint32_t t, const struct field *f, int fno,
                     struct ds_sample *s, size_t *k, char *why, size_t whylen)
{
	char q[32], q2[32];
	uint32_t n = bag_count(f, c->sep);
	if (n > c->max_bag[t])
		return bad(why, whylen, "field %d (table %u): a bag of %u IDs, above --max-bag %u",
		           fno, t, n, c->max_bag[t]);
	if (n > s->bag_cap - *k)
		return bad(why, whylen, "field %d (table %u): more than %zu IDs in the line", fno,
		           t, s->bag_cap);
	size_t start = 0;
	for (uint32_t j = 0; j < n; j++) {
		const char *e = memchr(f->p + start, c->sep, f->n - start);
		struct field id = {f->p + start, e ? (size_t)(e - (f->p + start)) : f->n - start};
		start += id.n + 1;
		int rc = split_weight(c, t, fno, j, &id,
		                      c->weighted && s->bag_wts ? &s->bag_wts[*k] : NULL, why,
		                      whylen);
		if (rc)
			return rc;
		if (id.n == 0)
			return bad(why, whylen,
			           "field %d (table %u): '%s': ID %u of the bag is empty", fno, t,
			           show(f, q, sizeof(q)), j + 1);
		if (!is_hex(&id))
			return bad(why, whylen,
			           "field %d (table %u): '%s' (ID %u of the bag) is not "
			           "a hex ID",
			           fno, t, show(&id, q2, sizeof(q2)), j + 1);
		s->bag_ids[(*k)++] = hash_id(c, t, &id);
	}
	s->lens[t] = n;
	return 0;
}

static int parse_multi_hot(const struct ds_parse_ctx *c, const char *line, size_t len,
                           struct ds_sample *s, char *why, size_t whylen)
{
	struct field f[MH_MAX_FIELDS];
	char q[32];
	const int want = c->ncols;
	int n = split(line, len, '\t', f, want);
	if (n != want)
		return bad(why, whylen,
		           "%s%d tab-separated fields, expected %d (label, %u dense, %u tables)",
		           n > want ? "more than " : "", n > want ? want : n, want, c->ndense,
		           c->ntables);
	if (parse_label(&f[0], &s->label))
		return bad(why, whylen, "field 1 (label): '%s' is not 0 or 1",
		           show(&f[0], q, sizeof(q)));
	for (uint32_t j = 0; j < c->ndense; j++) {
		double v = 0;
		if (f[1 + j].n && parse_num(&f[1 + j], &v))
			return bad(why, whylen, "field %u (dense %u): '%s' is not a number", j + 2,
			           j, show(&f[1 + j], q, sizeof(q)));
		s->dense[j] = dense_of(v);
	}
	size_t k = 0;
	for (uint32_t t = 0; t < c->ntables; t++) {
		int fno = (int)(2 + c->ndense + t);
		int rc = parse_bag(c, t, &f[fno - 1], fno, s, &k, why, whylen);
		if (rc)
			return rc;
	}
	return 0;
}

int esd_ds_parse_line(const struct ds_parse_ctx *c, const char *line, size_t len,
                      struct ds_sample *out, char *why, size_t whylen)
{
	switch (c->fmt) {
	case DS_FMT_CRITEO:
		return parse_criteo(c, line, len, out, why, whylen);
	case DS_FMT_AVAZU:
		return parse_avazu(c, line, len, out, why, whylen);
	case DS_FMT_SEARCH:
		return parse_search(c, line, len, out, why, whylen);
	case DS_FMT_MULTI_HOT:
		return parse_multi_hot(c, line, len, out, why, whylen);
	}
	return bad(why, whylen, "unknown format");
}
