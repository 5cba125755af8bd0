/*
 * Row store of a PS shard. Records are fixed-size and live in chunks that
 * never move, so a row pointer stays valid while other rows are created;
 * the index is an open-addressing table of record numbers (linear probing,
 * never deleted). Staged gradients are sorted by (key, worker) at the
 * barrier: the summation order is then independent of arrival order,
 * which is what makes two runs bit-identical. Partials (floats on the
 * wire) are summed in double and rounded once (esd/optim.h).
 */
#include "store.h"

#include <esd/err.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_ROWS 4096u

struct staged {
	uint64_t key;
	uint32_t worker;
	uint32_t off; /* index into grads (in units of dim floats) */
};

struct ps_store {
	unsigned dim;
	size_t state_len;
	size_t rec_bytes;
	struct esd_optim_params opt;
	uint64_t seed;
	/* arena */
	char **chunks;
	size_t nchunks, count;
	/* index: slots hold record number + 1 (0 = empty) */
	uint64_t *idx_key;
	uint32_t *idx_rec;
	size_t idx_cap; /* power of two */
	/* staged gradients */
	struct staged *stg;
	float *grads;
	size_t nstg, stg_cap;
	double *tmp, *tmp_in;
};

static inline uint64_t mix(uint64_t k)
{
	return esd_splitmix64(k);
}

int ps_store_create(unsigned dim, const struct esd_optim_params *opt, uint64_t seed,
		    struct ps_store **out)
{
	struct ps_store *st;
	if (dim == 0 || dim > (1u << 20) || esd_optim_params_check(opt))
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->dim = dim;
	st->opt = *opt;
	st->seed = seed;
	st->state_len = esd_optim_state_len(opt->opt, dim);
	st->rec_bytes = sizeof(struct ps_row) + (dim + st->state_len) * sizeof(float);
	st->rec_bytes = (st->rec_bytes + 63) & ~(size_t)63;
	st->idx_cap = 1024;
	st->idx_key = calloc(st->idx_cap, sizeof(*st->idx_key));
	st->idx_rec = calloc(st->idx_cap, sizeof(*st->idx_rec));
	st->tmp = calloc(dim, sizeof(double));
	st->tmp_in = calloc(dim, sizeof(double));
	if (!st->idx_key || !st->idx_rec || !st->tmp) {
		ps_store_free(st);
		return -ENOMEM;
	}
	*out = st;
	return 0;
}

void ps_store_free(struct ps_store *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->nchunks; i++)
		free(st->chunks[i]);
	free(st->chunks);
	free(st->idx_key);
	free(st->idx_rec);
	free(st->stg);
	free(st->grads);
	free(st->tmp);
	free(st->tmp_in);
	free(st);
}

unsigned ps_store_dim(const struct ps_store *st)
{
	return st->dim;
}

size_t ps_store_state_len(const struct ps_store *st)
{
	return st->state_len;
}

size_t ps_store_count(const struct ps_store *st)
{
	return st->count;
}

struct ps_row *ps_store_at(const struct ps_store *st, size_t i)
{
	if (i >= st->count)
		return NULL;
	return (struct ps_row *)(st->chunks[i / CHUNK_ROWS] + (i % CHUNK_ROWS) * st->rec_bytes);
}

static size_t probe(const struct ps_store *st, uint64_t key)
{
	size_t mask = st->idx_cap - 1, i = mix(key) & mask;
	while (st->idx_rec[i] && st->idx_key[i] != key)
		i = (i + 1) & mask;
	return i;
}

struct ps_row *ps_store_find(const struct ps_store *st, uint64_t key)
{
	size_t i = probe(st, key);
	return st->idx_rec[i] ? ps_store_at(st, st->idx_rec[i] - 1) : NULL;
}

static int grow_index(struct ps_store *st)
{
	size_t ncap = st->idx_cap * 2;
	uint64_t *nk = calloc(ncap, sizeof(*nk));
	uint32_t *nr = calloc(ncap, sizeof(*nr));
	if (!nk || !nr) {
		free(nk);
		free(nr);
		return -ENOMEM;
	}
	for (size_t i = 0; i < st->idx_cap; i++) {
		if (!st->idx_rec[i])
			continue;
		size_t j = mix(st->idx_key[i]) & (ncap - 1);
		while (nr[j])
			j = (j + 1) & (ncap - 1);
		nk[j] = st->idx_key[i];
		nr[j] = st->idx_rec[i];
	}
	free(st->idx_key);
	free(st->idx_rec);
	st->idx_key = nk;
	st->idx_rec = nr;
	st->idx_cap = ncap;
	return 0;
}

struct ps_row *ps_store_get(struct ps_store *st, uint64_t key)
{
	size_t i = probe(st, key);
	if (st->idx_rec[i])
		return ps_store_at(st, st->idx_rec[i] - 1);
	if ((st->count + 1) * 2 > st->idx_cap) {
		if (grow_index(st))
			return NULL;
		i = probe(st, key);
	}
	if (st->count == UINT32_MAX - 1)
		return NULL;
	if (st->count % CHUNK_ROWS == 0) {
		size_t c = st->count / CHUNK_ROWS;
		if (c == st->nchunks) {
			char **nc = realloc(st->chunks, (c + 1) * sizeof(*nc));
			if (!nc)
				return NULL;
			st->chunks = nc;
			st->chunks[c] = aligned_alloc(64, CHUNK_ROWS * st->rec_bytes);
			if (!st->chunks[c])
				return NULL;
			st->nchunks++;
		}
	}
	struct ps_row *r = ps_store_at(st, st->count++);
	/* ps_store_at checks against count, which now includes r */
	r->key = key;
	r->clock = 0;
	esd_row_init(st->seed, key, st->dim, r->data);
	esd_optim_state_init(&st->opt, st->dim, r->data + st->dim);
	st->idx_key[i] = key;
	st->idx_rec[i] = (uint32_t)st->count;
	return r;
}

int ps_store_put_value(struct ps_store *st, uint64_t key, uint64_t clock, const float *value,
		       const float *state)
{
	struct ps_row *r = ps_store_get(st, key);
	if (!r)
		return -ENOMEM;
	memcpy(r->data, value, st->dim * sizeof(float));
	if (st->state_len && state)
		memcpy(r->data + st->dim, state, st->state_len * sizeof(float));
	r->clock = clock;
	return 0;
}

int ps_store_stage_grad(struct ps_store *st, uint32_t worker, uint64_t key, const float *grad)
{
	if (st->nstg == st->stg_cap) {
		size_t cap = st->stg_cap ? st->stg_cap * 2 : 1024;
		struct staged *ns = realloc(st->stg, cap * sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		st->stg = ns;
		float *ng = realloc(st->grads, cap * st->dim * sizeof(float));
		if (!ng)
			return -ENOMEM;
		st->grads = ng;
		st->stg_cap = cap;
	}
	struct staged *s = &st->stg[st->nstg];
	s->key = key;
	s->worker = worker;
	s->off = (uint32_t)st->nstg;
	memcpy(st->grads + (size_t)st->nstg * st->dim, grad, st->dim * sizeof(float));
	st->nstg++;
	return 0;
}

size_t ps_store_staged(const struct ps_store *st)
{
	return st->nstg;
}

static int cmp_staged(const void *a, const void *b)
{
	const struct staged *x = a, *y = b;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return (x->worker > y->worker) - (x->worker < y->worker);
}

long ps_store_apply_staged(struct ps_store *st)
{
	long updated = 0;
	if (!st->nstg)
		return 0;
	qsort(st->stg, st->nstg, sizeof(*st->stg), cmp_staged);
	for (size_t i = 0; i < st->nstg;) {
		size_t j = i;
		uint64_t key = st->stg[i].key;
		memset(st->tmp, 0, st->dim * sizeof(double));
		for (; j < st->nstg && st->stg[j].key == key; j++) {
			if (j > i && st->stg[j].worker == st->stg[j - 1].worker)
				return -EEXIST; /* dedup upstream failed: refuse to double-apply */
			const float *g = st->grads + (size_t)st->stg[j].off * st->dim;
			for (unsigned d = 0; d < st->dim; d++)
				st->tmp_in[d] = g[d];
			esd_optim_grad_add(st->dim, st->tmp, st->tmp_in);
		}
		struct ps_row *r = ps_store_get(st, key);
		if (!r)
			return -ENOMEM;
		esd_optim_apply_sum(&st->opt, st->dim, r->data, r->data + st->dim, st->tmp, r->clock + 1);
		r->clock++;
		updated++;
		i = j;
	}
	st->nstg = 0;
	return updated;
}
