/*
 * The single-process reference trainer (reftrain.h): the model the
 * distributed runtime must reproduce. Rows live in fixed-size chunks so
 * pointers handed to the model stay valid while new rows are added; a
 * small open-addressing index maps keys to rows.
 */
#include "reftrain.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <esd/ckpt.h>
#include <esd/err.h>
#include <esd/log.h>

#define CHUNK_ROWS 4096u

struct row_store {
	uint32_t dim, sf;
	size_t stride; /* floats per row: value, state */
	size_t n;      /* rows */
	float **chunks;
	double **gchunks; /* the rows' gradient sums, dim doubles each */
	size_t nchunks;
	esd_key_t *keys;     /* n */
	uint64_t *clocks;    /* n */
	uint64_t *last_iter; /* n: last iteration the row was touched + 1 */
	size_t cap;          /* of keys/clocks/last_iter */
	uint32_t *index;     /* hash: row + 1, 0 = empty */
	size_t icap;         /* power of 2 */
};

static float *row_at(const struct row_store *s, size_t i)
{
	return s->chunks[i / CHUNK_ROWS] + (i % CHUNK_ROWS) * s->stride;
}

static double *grad_at(const struct row_store *s, size_t i)
{
	return s->gchunks[i / CHUNK_ROWS] + (i % CHUNK_ROWS) * s->dim;
}

static int index_grow(struct row_store *s)
{
	size_t icap = s->icap ? s->icap * 2 : 1024;
	uint32_t *idx = calloc(icap, sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++) {
		size_t h = (size_t)esd_splitmix64(s->keys[i]) & (icap - 1);
		while (idx[h])
			h = (h + 1) & (icap - 1);
		idx[h] = (uint32_t)(i + 1);
	}
	free(s->index);
	s->index = idx;
	s->icap = icap;
	return 0;
}

/* Row index of key, created (initialised from the seed) when new. */
static int64_t row_get(struct row_store *s, const struct esd_ref_config *cfg, esd_key_t key)
{
	size_t h;
	if (2 * (s->n + 1) > s->icap && index_grow(s))
		return -ENOMEM;
	for (h = (size_t)esd_splitmix64(key) & (s->icap - 1); s->index[h];
	     h = (h + 1) & (s->icap - 1))
		if (s->keys[s->index[h] - 1] == key)
			return (int64_t)s->index[h] - 1;
	if (s->n >= UINT32_MAX - 1)
		return -ENOMEM;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : CHUNK_ROWS;
		esd_key_t *k = realloc(s->keys, cap * sizeof(*k));
		if (k)
			s->keys = k;
		uint64_t *c = realloc(s->clocks, cap * sizeof(*c));
		if (c)
			s->clocks = c;
		uint64_t *l = realloc(s->last_iter, cap * sizeof(*l));
		if (l)
			s->last_iter = l;
		if (!k || !c || !l)
			return -ENOMEM;
		s->cap = cap;
	}
	if (s->n % CHUNK_ROWS == 0) {
		float **ch = realloc(s->chunks, (s->nchunks + 1) * sizeof(*ch));
		if (!ch)
			return -ENOMEM;
		s->chunks = ch;
		double **gch = realloc(s->gchunks, (s->nchunks + 1) * sizeof(*gch));
		if (!gch)
			return -ENOMEM;
		s->gchunks = gch;
		ch[s->nchunks] = malloc(CHUNK_ROWS * s->stride * sizeof(float));
		gch[s->nchunks] = malloc(CHUNK_ROWS * (size_t)s->dim * sizeof(double));
		if (!ch[s->nchunks] || !gch[s->nchunks]) {
			free(ch[s->nchunks]);
			free(gch[s->nchunks]);
			return -ENOMEM;
		}
		s->nchunks++;
	}
	size_t i = s->n++;
	float *r = row_at(s, i);
	s->keys[i] = key;
	s->clocks[i] = 0;
	s->last_iter[i] = 0;
	const uint32_t t = esd_key_table(key);
	esd_row_init_table(cfg->seed, key, t < cfg->ndims ? cfg->dims[t] : s->dim, s->dim, r);
	esd_optim_state_init(&cfg->optim, s->dim, r + s->dim);
	s->index[h] = (uint32_t)(i + 1);
	return (int64_t)i;
}

static void store_free(struct row_store *s)
{
	for (size_t i = 0; i < s->nchunks; i++) {
		free(s->chunks[i]);
		free(s->gchunks[i]);
	}
	free(s->chunks);
	free(s->gchunks);
	free(s->keys);
	free(s->clocks);
	free(s->last_iter);
	free(s->index);
}

static const struct row_store *sort_store;

static int by_key(const void *a, const void *b)
{
	esd_key_t x = sort_store->keys[*(const uint32_t *)a];
	esd_key_t y = sort_store->keys[*(const uint32_t *)b];
	return x < y ? -1 : x > y;
}

static int write_tables(const struct esd_ref_config *cfg, struct row_store *s, const float *dense,
                        const float *dstate, size_t dense_len, uint64_t dense_clock,
                        uint64_t cursor, const char *path)
{
	struct esd_ckpt_meta m = {.seed = cfg->seed,
	                          .iteration = cfg->iterations,
	                          .data_cursor = cursor,
	                          .dim = s->dim,
	                          .ntables = cfg->ndims, /* each row at its table's dim */
	                          .table_dims = cfg->dims,
	                          .optimizer = cfg->optim.opt,
	                          .shard = 0,
	                          .nshards = 1,
	                          .dense_len = dense_len,
	                          .dense_clock = dense_clock};
	struct esd_ckpt_writer *w;
	uint32_t *order = malloc((s->n + 1) * sizeof(*order));
	int rc;
	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++)
		order[i] = (uint32_t)i;
	sort_store = s; /* single-threaded tool: a static for qsort's comparator */
	qsort(order, s->n, sizeof(*order), by_key);
	rc = esd_ckpt_writer_open(path, &m, &w);
	if (rc)
		goto out;
	for (size_t j = 0; j < s->n && !rc; j++) {
		const float *r = row_at(s, order[j]);
		rc = esd_ckpt_write_row(w, s->keys[order[j]], s->clocks[order[j]], r,
		                        s->sf ? r + s->dim : NULL);
	}
	if (!rc)
		rc = esd_ckpt_write_dense(w, dense, s->sf ? dstate : NULL);
	if (rc) {
		esd_ckpt_writer_abort(w);
		goto out;
	}
	rc = esd_ckpt_writer_commit(w);
out:
	free(order);
	return rc;
}

struct resume_ctx {
	struct row_store *s;
	const struct esd_ref_config *cfg;
};

static int resume_row(void *arg, esd_key_t key, uint64_t clock, const float *value,
                      const float *state)
{
	struct resume_ctx *c = arg;
	int64_t r = row_get(c->s, c->cfg, key);
	if (r < 0)
		return (int)r;
	float *row = row_at(c->s, (size_t)r);
	memcpy(row, value, c->s->dim * sizeof(float));
	if (c->s->sf)
		memcpy(row + c->s->dim, state, (size_t)c->s->dim * c->s->sf * sizeof(float));
	c->s->clocks[r] = clock;
	return 0;
}

/* What a resume loads besides the rows. */
struct resume_out {
	float *dense, *dstate;
	size_t dense_len;
	uint64_t iteration, dense_clock, cursor;
	bool have_dense;
};

/* One checkpoint file of this configuration into s and *o: its rows; its
 * dense table when it has one. first: the file sets the iteration and
 * cursor, else it must have the same. */
static int resume_file(const struct esd_ref_config *cfg, struct row_store *s, const char *path,
                       bool first, struct resume_out *o, uint32_t *nshards)
{
	struct esd_ckpt_reader *r;
	struct esd_ckpt_error err;
	int rc = esd_ckpt_open(path, &r, &err);
	if (rc) {
		ESD_ERR("ref", "cannot resume: %s", err.msg);
		return rc;
	}
	const struct esd_ckpt_meta *m = &esd_ckpt_info(r)->meta;
	if (m->seed != cfg->seed || m->dim != cfg->dim || m->optimizer != cfg->optim.opt ||
	    (m->dense_len && m->dense_len != o->dense_len) || m->iteration > cfg->iterations) {
		ESD_ERR("ref",
		        "cannot resume from %s: it has seed %" PRIu64
		        ", dim %u, optimizer %s, %" PRIu64 " dense floats, iteration %" PRIu64
		        "; this run wants seed %" PRIu64 ", dim %u, optimizer %s, %zu dense "
		        "floats, up to iteration %" PRIu64,
		        path, m->seed, m->dim, esd_optim_name(m->optimizer), m->dense_len,
		        m->iteration, cfg->seed, cfg->dim, esd_optim_name(cfg->optim.opt),
		        o->dense_len, cfg->iterations);
		rc = -EINVAL;
		goto out;
	}
	if (!first && (m->iteration != o->iteration || m->data_cursor != o->cursor ||
	               m->nshards != *nshards)) {
		ESD_ERR("ref", "cannot resume: %s is of iteration %" PRIu64 ", cursor %" PRIu64
		        ", %u shards; the checkpoint's first file of iteration %" PRIu64
		        ", cursor %" PRIu64 ", %u shards",
		        path, m->iteration, m->data_cursor, m->nshards, o->iteration, o->cursor,
		        *nshards);
		rc = -EINVAL;
		goto out;
	}
	struct resume_ctx c = {s, cfg};
	rc = esd_ckpt_read_rows(r, resume_row, &c);
	if (!rc && m->dense_len) {
		rc = esd_ckpt_read_dense(r, o->dense, s->sf ? o->dstate : NULL);
		o->dense_clock = m->dense_clock;
		o->have_dense = true;
	}
	o->iteration = m->iteration;
	o->cursor = m->data_cursor;
	*nshards = m->nshards;
out:
	esd_ckpt_close(r);
	return rc;
}

/* Load a checkpoint of this configuration: a file, or a directory of a
 * job's shard files (DIR/ps-shard<i>.ckpt for every shard the files say
 * the job had): rows, dense table, clocks, iteration and cursor. */
static int resume(const struct esd_ref_config *cfg, struct row_store *s, struct resume_out *o)
{
	struct stat sb;
	if (stat(cfg->resume, &sb) || !S_ISDIR(sb.st_mode)) {
		uint32_t n = 1;
		int rc = resume_file(cfg, s, cfg->resume, true, o, &n);
		if (!rc && !o->have_dense) {
			ESD_ERR("ref", "cannot resume from %s: it holds no dense table (a shard "
			        "other than 0: give the checkpoint's directory)", cfg->resume);
			rc = -EINVAL;
		}
		return rc;
	}
	uint32_t n = 1;
	int rc = 0;
	for (uint32_t i = 0; i < n && !rc; i++) {
		char path[4200];
		snprintf(path, sizeof(path), "%s/ps-shard%u.ckpt", cfg->resume, i);
		if (access(path, F_OK)) {
			ESD_ERR("ref", "cannot resume from %s: %s is missing%s", cfg->resume, path,
			        i ? " (the checkpoint's other files say it has more shards)" : "");
			return -ENOENT;
		}
		rc = resume_file(cfg, s, path, i == 0, o, &n);
	}
	if (!rc && !o->have_dense) {
		ESD_ERR("ref", "cannot resume from %s: no file holds the dense table", cfg->resume);
		rc = -EINVAL;
	}
	return rc;
}

/* Long: the single-process reference training loop (batch, forward, backward, optimizer)
 * that the runtime must equal, kept as one readable loop. */
int esd_ref_train(const struct esd_ref_config *cfg, const struct esd_ref_source *src,
                  const char *out_path, struct esd_ref_stats *stats)
{
	struct esd_model *model = NULL;
	struct row_store s = {0};
	const uint32_t k = cfg ? cfg->batch : 0;
	esd_key_t *keys = NULL;
	float *labels = NULL, *dfeat = NULL, *dense = NULL, *dstate = NULL;
	double *dgrad = NULL;
	const float **rows = NULL;
	double **grads = NULL;
	uint32_t *touched = NULL, *bag_off = NULL;
	float *wts = NULL;
	size_t dense_len;
	uint64_t cursor, start = 0, dense_clock = 0;
	int rc;

	if (!cfg || !src || !src->next || !out_path || !k || !src->tables ||
	    esd_optim_params_check(&cfg->optim))
		return -EINVAL;
	if (cfg->ndims && cfg->ndims != src->tables) {
		fprintf(stderr, "esd-ref: --dims lists %u dims but the samples have %u tables\n",
		        cfg->ndims, src->tables);
		return -EINVAL;
	}
	struct esd_model_shape shape = {.tables = src->tables,
	                                .dim = cfg->dim,
	                                .dense = src->dense,
	                                .hidden = cfg->hidden,
	                                .dims = cfg->ndims ? cfg->dims : NULL};
	rc = esd_model_create(&shape, &model);
	if (rc)
		return rc;
	dense_len = esd_model_dense_len(model);
	s.dim = cfg->dim;
	s.sf = esd_optimizer_state_floats(cfg->optim.opt);
	s.stride = (size_t)s.dim * (1 + s.sf);
	const bool bags = src->width > src->tables;
	const size_t kt = (size_t)k * (bags ? src->width : src->tables);
	rc = -ENOMEM;
	keys = malloc(kt * sizeof(*keys));
	bag_off = malloc(((size_t)k * src->tables + 1) * sizeof(*bag_off));
	labels = malloc(k * sizeof(*labels));
	dfeat = malloc(((size_t)k * src->dense + 1) * sizeof(*dfeat));
	rows = malloc(kt * sizeof(*rows));
	grads = malloc(kt * sizeof(*grads));
	touched = malloc(kt * sizeof(*touched));
	wts = src->next_w ? malloc(kt * sizeof(*wts)) : NULL;
	dense = malloc(dense_len * sizeof(float));
	dstate = malloc((dense_len * s.sf + 1) * sizeof(float));
	dgrad = malloc(dense_len * sizeof(double));
	if (!keys || !bag_off || !labels || !dfeat || !rows || !grads || !touched || !dense ||
	    !dstate || !dgrad || (src->next_w && !wts))
		goto out;
	for (size_t j = 0; j <= (size_t)k * src->tables; j++)
		bag_off[j] = (uint32_t)j; /* a source without bags: one key per feature */
	esd_model_dense_init(model, cfg->seed, dense);
	esd_optim_state_init(&cfg->optim, (unsigned)dense_len, dstate);
	if (stats)
		memset(stats, 0, sizeof(*stats));

	cursor = cfg->cursor;
	if (cfg->resume) {
		struct resume_out ro = {.dense = dense, .dstate = dstate, .dense_len = dense_len};
		rc = resume(cfg, &s, &ro);
		if (rc)
			goto out;
		start = ro.iteration;
		dense_clock = ro.dense_clock;
		cursor = ro.cursor;
	}
	for (uint64_t it = start; it < cfg->iterations; it++) {
		int64_t got = wts ? src->next_w(src->arg, cursor, k, keys, bag_off, labels, dfeat, wts)
		                  : src->next(src->arg, cursor, k, keys, bag_off, labels, dfeat);
		if (got < 0) {
			rc = (int)got;
			goto out;
		}
		if ((uint64_t)got < k) {
			rc = -ENODATA;
			goto out;
		}
		/* resolve every key first (creating rows), then take pointers */
		size_t nt = 0, nk = bag_off[(size_t)k * src->tables];
		for (size_t j = 0; j < nk; j++) {
			int64_t r = row_get(&s, cfg, keys[j]);
			if (r < 0) {
				rc = (int)r;
				goto out;
			}
			if (s.last_iter[r] != it + 1) {
				s.last_iter[r] = it + 1;
				touched[nt++] = (uint32_t)r;
				memset(grad_at(&s, (size_t)r), 0, s.dim * sizeof(double));
			}
			rows[j] = row_at(&s, (size_t)r);
			grads[j] = grad_at(&s, (size_t)r);
		}
		memset(dgrad, 0, dense_len * sizeof(double));
		struct esd_model_batch b = {.m = k, .rows = rows, .row_grads = grads, .labels = labels,
		                            .dense = dfeat, .bag_off = bag_off, .weights = wts};
		double loss;
		rc = esd_model_step(model, dense, &b, k, &loss, dgrad, NULL);
		if (rc)
			goto out;
		/* one update per row in the batch, with the sum of its gradients */
		for (size_t j = 0; j < nt; j++) {
			float *row = row_at(&s, touched[j]);
			esd_optim_apply_sum(&cfg->optim, s.dim, row, row + s.dim,
			                    grad_at(&s, touched[j]), ++s.clocks[touched[j]]);
		}
		esd_optim_apply_sum(&cfg->optim, (unsigned)dense_len, dense, dstate, dgrad,
		                    ++dense_clock);
		cursor += k;
		if (cfg->verbose)
			printf("iteration %llu loss %.6f rows %zu\n", (unsigned long long)it, loss,
			       s.n);
		if (stats) {
			if (it == start)
				stats->first_loss = loss;
			stats->last_loss = loss;
		}
	}
	if (stats)
		stats->rows = s.n;
	rc = write_tables(cfg, &s, dense, dstate, dense_len, dense_clock, cursor, out_path);
out:
	esd_model_free(model);
	store_free(&s);
	free(keys);
	free(bag_off);
	free(labels);
	free(dfeat);
	free(rows);
	free(grads);
	free(touched);
	free(wts);
	free(dense);
	free(dstate);
	free(dgrad);
	return rc;
}

/* ---- the built-in generator ------------------------------------------ */

static double unit(uint64_t x)
{
	return (double)(esd_splitmix64(x) >> 11) * 0x1.0p-53;
}

static int64_t gen_next(void *arg, uint64_t cursor, uint32_t k, esd_key_t *keys, uint32_t *bag_off,
                        float *labels, float *dense)
{
	const struct esd_ref_gen *g = arg;
	(void)bag_off;
	const uint64_t base = esd_splitmix64(g->seed ^ UINT64_C(0x5eed5eed5eed5eed));
	for (uint32_t i = 0; i < k; i++) {
		uint64_t si = esd_splitmix64(base + (cursor + i) * ESD_SPLITMIX64_GAMMA);
		double score = 0;
		for (uint32_t t = 0; t < g->tables; t++) {
			double u = unit(si + t);
			uint64_t id = (uint64_t)((double)g->rows * pow(u, g->skew));
			if (id >= g->rows)
				id = g->rows - 1;
			esd_key_t key = esd_key_make(t, id);
			keys[(size_t)i * g->tables + t] = key;
			score += (esd_splitmix64(key ^ base) & 1) ? 1.0 : -1.0;
		}
		for (uint32_t j = 0; j < g->dense; j++) {
			float v = (float)(2.0 * unit(si + g->tables + j) - 1.0);
			dense[(size_t)i * g->dense + j] = v;
			score += v;
		}
		labels[i] = score > 0 ? 1.0f : 0.0f;
	}
	return k;
}

int esd_ref_gen_source(struct esd_ref_gen *gen, struct esd_ref_source *src)
{
	if (!gen || !src || !gen->tables || !gen->rows || !(gen->skew >= 1.0))
		return -EINVAL;
	src->tables = gen->tables;
	src->dense = gen->dense;
	src->width = 0;
	src->next = gen_next;
	src->next_w = NULL;
	src->arg = gen;
	src->samples = 0; /* endless */
	return 0;
}
