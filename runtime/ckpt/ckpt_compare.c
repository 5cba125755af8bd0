/*
 * Comparing two models given as sets of checkpoint files: the runtime's
 * correctness bar (distributed tables vs the single-process reference,
 * within float rounding) and its reproducibility bar (two runs, bit for
 * bit). Side A is loaded into a hash table; side B is streamed against it.
 */
#include "ckpt_format.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <esd/optim.h>

struct side_a {
	size_t n, cap; /* rows loaded, hash capacity (power of 2) */
	size_t width;  /* floats kept per row: dim, or dim * (1 + sf) */
	esd_key_t *keys;
	uint64_t *clocks;
	float *vals;
	uint8_t *seen;
	uint32_t *slot; /* hash: row index + 1, 0 = empty */
};

struct cmp_ctx {
	struct side_a *a;
	const struct esd_ckpt_cmp_opts *o;
	struct esd_ckpt_cmp_result *res;
	uint32_t dim, sf;
	int loading; /* 1: filling side A; 0: comparing side B */
	char row_what[sizeof(((struct esd_ckpt_cmp_result *)0)->first_what)];
};

static size_t hash_slot(const struct side_a *a, esd_key_t key)
{
	return (size_t)esd_splitmix64(key) & (a->cap - 1);
}

static int64_t find(const struct side_a *a, esd_key_t key)
{
	for (size_t s = hash_slot(a, key);; s = (s + 1) & (a->cap - 1)) {
		if (!a->slot[s])
			return -1;
		if (a->keys[a->slot[s] - 1] == key)
			return (int64_t)a->slot[s] - 1;
	}
}

static void note_key(struct cmp_ctx *c, esd_key_t key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void note_key(struct cmp_ctx *c, esd_key_t key, const char *fmt, ...)
{
	struct esd_ckpt_cmp_result *r = c->res;
	if (r->has_first && key >= r->first_key)
		return;
	va_list ap;
	r->has_first = true;
	r->first_key = key;
	va_start(ap, fmt);
	vsnprintf(c->row_what, sizeof(c->row_what), fmt, ap);
	va_end(ap);
}

/* Compare n floats; update the maxima; return the first differing index or -1. */
static int64_t cmp_floats(const struct esd_ckpt_cmp_opts *o, struct esd_ckpt_cmp_result *r,
                          const float *x, const float *y, size_t n)
{
	int64_t first = -1;
	for (size_t i = 0; i < n; i++) {
		double a = x[i], b = y[i];
		double d = fabs(a - b), m = fmax(fabs(a), fabs(b));
		double rel = m > 0 ? d / m : 0.0;
		int differ;
		if (isnan(a) || isnan(b)) {
			d = rel = INFINITY;
			differ = 1;
		} else if (o->exact) {
			differ = memcmp(&x[i], &y[i], sizeof(float)) != 0;
		} else {
			differ = d > o->atol + o->rtol * m;
		}
		if (d > r->max_abs)
			r->max_abs = d;
		if (rel > r->max_rel)
			r->max_rel = rel;
		if (differ && first < 0)
			first = (int64_t)i;
	}
	return first;
}

static int on_row(void *arg, esd_key_t key, uint64_t clock, const float *value, const float *state)
{
	struct cmp_ctx *c = arg;
	struct side_a *a = c->a;
	const size_t dim = c->dim;
	if (c->loading) {
		if (find(a, key) >= 0) {
			c->res->duplicates++;
			note_key(c, key, "key 0x%" PRIx64 " twice in side A", key);
			return 0;
		}
		size_t i = a->n++;
		a->keys[i] = key;
		a->clocks[i] = clock;
		memcpy(a->vals + i * a->width, value, dim * sizeof(float));
		if (a->width > dim)
			memcpy(a->vals + i * a->width + dim, state, dim * c->sf * sizeof(float));
		size_t s = hash_slot(a, key);
		while (a->slot[s])
			s = (s + 1) & (a->cap - 1);
		a->slot[s] = (uint32_t)(i + 1);
		return 0;
	}
	int64_t i = find(a, key);
	if (i < 0) {
		c->res->only_b++;
		note_key(c, key, "key 0x%" PRIx64 " only in side B", key);
		return 0;
	}
	if (a->seen[i]) {
		c->res->duplicates++;
		note_key(c, key, "key 0x%" PRIx64 " twice in side B", key);
		return 0;
	}
	a->seen[i] = 1;
	const float *av = a->vals + (size_t)i * a->width;
	int differ = 0;
	int64_t e = cmp_floats(c->o, c->res, av, value, dim);
	if (e >= 0) {
		differ = 1;
		note_key(c, key, "key 0x%" PRIx64 " value[%" PRId64 "]: %.9g vs %.9g", key, e,
		         (double)av[e], (double)value[e]);
	}
	if (a->width > dim) {
		e = cmp_floats(c->o, c->res, av + dim, state, dim * c->sf);
		if (e >= 0) {
			differ = 1;
			note_key(c, key, "key 0x%" PRIx64 " state[%" PRId64 "]: %.9g vs %.9g", key,
			         e, (double)av[dim + (size_t)e], (double)state[e]);
		}
	}
	if (c->o->clocks && a->clocks[i] != clock) {
		differ = 1;
		note_key(c, key, "key 0x%" PRIx64 " clock %" PRIu64 " vs %" PRIu64, key,
		         a->clocks[i], clock);
	}
	c->res->rows_differ += (uint64_t)differ;
	return 0;
}

/* Open every file of a side; note the first metadata difference against ref. */
static int open_side(const char *const *paths, size_t n, struct esd_ckpt_reader **rd,
                     struct esd_ckpt_error *err)
{
	for (size_t i = 0; i < n; i++) {
		int rc = esd_ckpt_open(paths[i], &rd[i], err);
		if (rc)
			return rc;
	}
	return 0;
}

static int meta_cmp(const struct esd_ckpt_meta *x, const struct esd_ckpt_meta *y, char *what,
                    size_t len)
{
#define FIELD(f)                                                                                   \
	if (x->f != y->f) {                                                                        \
		snprintf(what, len, "meta: " #f " %" PRIu64 " vs %" PRIu64, (uint64_t)x->f,        \
		         (uint64_t)y->f);                                                          \
		return 1;                                                                          \
	}
	FIELD(seed)
	FIELD(iteration)
	FIELD(data_cursor)
	FIELD(dim)
	FIELD(optimizer)
#undef FIELD
	return 0;
}

/* The one reader of a side holding the dense table, NULL if none;
 * -EINVAL through *rc if several do. */
static struct esd_ckpt_reader *dense_holder(struct esd_ckpt_reader **rd, size_t n, int *rc)
{
	struct esd_ckpt_reader *h = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!esd_ckpt_info(rd[i])->meta.dense_len)
			continue;
		if (h)
			*rc = -EINVAL;
		h = rd[i];
	}
	return h;
}

static int cmp_dense(struct esd_ckpt_reader *ha, struct esd_ckpt_reader *hb, struct cmp_ctx *c,
                     char *what, size_t len)
{
	const struct esd_ckpt_meta *ma = &esd_ckpt_info(ha)->meta, *mb = &esd_ckpt_info(hb)->meta;
	if (ma->dense_len != mb->dense_len) {
		snprintf(what, len, "dense: %" PRIu64 " vs %" PRIu64 " floats", ma->dense_len,
		         mb->dense_len);
		return 1;
	}
	if (ma->dense_clock != mb->dense_clock) {
		snprintf(what, len, "dense: clock %" PRIu64 " vs %" PRIu64, ma->dense_clock,
		         mb->dense_clock);
		return 1;
	}
	size_t n = (size_t)ma->dense_len * (1 + c->sf);
	float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
	int rc = -ENOMEM;
	if (!x || !y)
		goto out;
	rc = esd_ckpt_read_dense(ha, x, x + ma->dense_len);
	if (!rc)
		rc = esd_ckpt_read_dense(hb, y, y + ma->dense_len);
	if (rc)
		goto out;
	int64_t e = cmp_floats(c->o, c->res, x, y, c->o->state ? n : (size_t)ma->dense_len);
	if (e >= 0)
		snprintf(what, len, "dense[%" PRId64 "]: %.9g vs %.9g", e, (double)x[e],
		         (double)y[e]);
	rc = e >= 0;
out:
	free(x);
	free(y);
	return rc;
}

/* Long: two checkpoint sets compared section by section (header, rows, dense table, state),
 * each difference named where it is found. */
int esd_ckpt_compare(const char *const *pa, size_t na, const char *const *pb, size_t nb,
                     const struct esd_ckpt_cmp_opts *opts, struct esd_ckpt_cmp_result *res,
                     struct esd_ckpt_error *err)
{
	static const struct esd_ckpt_cmp_opts defaults = {
	    .rtol = 1e-5, .atol = 1e-8, .state = true, .clocks = true};
	struct esd_ckpt_reader **ra = NULL, **rb = NULL;
	struct side_a a = {0};
	struct cmp_ctx c = {0};
	char meta_what[sizeof(res->first_what)] = "", dense_what[sizeof(res->first_what)] = "";
	int rc;

	if (err)
		memset(err, 0, sizeof(*err));
	if (!pa || !pb || !na || !nb || !res)
		return -EINVAL;
	memset(res, 0, sizeof(*res));
	c.o = opts ? opts : &defaults;
	c.res = res;
	c.a = &a;
	ra = calloc(na, sizeof(*ra));
	rb = calloc(nb, sizeof(*rb));
	rc = -ENOMEM;
	if (!ra || !rb)
		goto out;
	rc = open_side(pa, na, ra, err);
	if (!rc)
		rc = open_side(pb, nb, rb, err);
	if (rc)
		goto out;

	const struct esd_ckpt_meta *m0 = &esd_ckpt_info(ra[0])->meta;
	for (size_t i = 1; i < na && !res->meta_differ; i++)
		res->meta_differ =
		    meta_cmp(m0, &esd_ckpt_info(ra[i])->meta, meta_what, sizeof(meta_what));
	for (size_t i = 0; i < nb && !res->meta_differ; i++)
		res->meta_differ =
		    meta_cmp(m0, &esd_ckpt_info(rb[i])->meta, meta_what, sizeof(meta_what));
	for (size_t i = 0; i < na; i++)
		res->rows_a += esd_ckpt_info(ra[i])->row_count;
	for (size_t i = 0; i < nb; i++)
		res->rows_b += esd_ckpt_info(rb[i])->row_count;

	c.dim = m0->dim;
	c.sf = esd_optimizer_state_floats(m0->optimizer);
	if (!res->meta_differ) {
		a.width = c.o->state ? (size_t)c.dim * (1 + c.sf) : c.dim;
		a.cap = 16;
		while (a.cap < 2 * res->rows_a)
			a.cap *= 2;
		rc = -ENOMEM;
		if (res->rows_a >= UINT32_MAX)
			goto out;
		a.keys = malloc(res->rows_a * sizeof(*a.keys) + 1);
		a.clocks = malloc(res->rows_a * sizeof(*a.clocks) + 1);
		a.vals = malloc(res->rows_a * a.width * sizeof(float) + 1);
		a.seen = calloc(res->rows_a + 1, 1);
		a.slot = calloc(a.cap, sizeof(*a.slot));
		if (!a.keys || !a.clocks || !a.vals || !a.seen || !a.slot)
			goto out;
		c.loading = 1;
		for (size_t i = 0; i < na; i++)
			if ((rc = esd_ckpt_read_rows(ra[i], on_row, &c)))
				goto out;
		c.loading = 0;
		for (size_t i = 0; i < nb; i++)
			if ((rc = esd_ckpt_read_rows(rb[i], on_row, &c)))
				goto out;
		for (size_t i = 0; i < a.n; i++)
			if (!a.seen[i]) {
				res->only_a++;
				note_key(&c, a.keys[i], "key 0x%" PRIx64 " only in side A",
				         a.keys[i]);
			}

		rc = 0;
		struct esd_ckpt_reader *ha = dense_holder(ra, na, &rc);
		struct esd_ckpt_reader *hb = dense_holder(rb, nb, &rc);
		if (rc)
			goto out;
		if (!ha != !hb) {
			res->dense_differ = true;
			snprintf(dense_what, sizeof(dense_what), "dense: only side %s has a table",
			         ha ? "A" : "B");
		} else if (ha) {
			rc = cmp_dense(ha, hb, &c, dense_what, sizeof(dense_what));
			if (rc < 0)
				goto out;
			res->dense_differ = rc == 1;
			rc = 0;
		}
	}
	res->equal = !res->meta_differ && !res->dense_differ && !res->rows_differ && !res->only_a &&
	             !res->only_b && !res->duplicates;
	if (res->meta_differ)
		snprintf(res->first_what, sizeof(res->first_what), "%s", meta_what);
	else if (res->dense_differ)
		snprintf(res->first_what, sizeof(res->first_what), "%s", dense_what);
	else
		snprintf(res->first_what, sizeof(res->first_what), "%s", c.row_what);
	rc = 0;
out:
	for (size_t i = 0; ra && i < na; i++)
		esd_ckpt_close(ra[i]);
	for (size_t i = 0; rb && i < nb; i++)
		esd_ckpt_close(rb[i]);
	free(ra);
	free(rb);
	free(a.keys);
	free(a.clocks);
	free(a.vals);
	free(a.seen);
	free(a.slot);
	return rc;
}
