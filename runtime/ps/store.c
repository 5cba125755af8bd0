/*
 * Row store of a PS shard. Records are fixed-size; in RAM they live in
 * chunks that never move, so a row pointer stays valid while other rows are
 * created. On disk (ps.store_dir) they live in one unnamed row file, record
 * i at byte i * rec_bytes, read and written with pread / pwrite (never
 * mapped: mapped pages of the file would be charged to the shard's memory
 * and written back when the kernel chooses), and a cache of rows in RAM
 * (two-way set-associative by record number, most of ps.store_ram)
 * serves the hot rows: a miss writes the victim back if it changed and
 * reads the row in. Write-back is bounded: after every few MiB written
 * the shard waits for the round of write-back started before and starts
 * the next, so at most two rounds of the file's pages are dirty (a memory
 * cgroup cannot reclaim dirty pages; the clean ones it reclaims as any
 * page cache, and read-ahead is off). A read window
 * (a run of records read in one call) serves the rows a checkpoint walks;
 * write-backs keep it current. A row pointer from ps_store_get or
 * ps_store_at lasts until the next call into the store; the index is an
 * open-addressing table of record numbers (linear probing, never deleted).
 * Staged gradients are sorted by (key, worker) at the barrier: the
 * summation order is then independent of arrival order, which is what
 * makes two runs bit-identical. Partials (floats on the wire) are summed in
 * double and rounded once (esd/optim.h).
 */
#include "store.h"

#include <esd/err.h>
#include <esd/log.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK_ROWS 4096u
#define WINDOW_BYTES (1u << 20)
/* Bytes written between write-back rounds: small enough that waiting for
 * one round holds the shard up briefly on a slow disk. */
#define WRITEBACK_BYTES (4u << 20)

struct ps_disk {
	int fd;
	/* the row cache: 2 ways a set, crec UINT32_MAX when empty */
	char *slots;
	uint32_t *crec;
	uint8_t *dirty, *mru;
	size_t nsets;
	/* the read window: records [win0, win0 + win_n) as last read */
	char *win;
	size_t win0, win_n, win_cap;
	/* bytes written since the last write-back round */
	size_t io_bytes, io_budget;
	int err; /* the first I/O error (-errno), kept */
};

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
	/* model.dims: table t's rows are initialised with table_dims[t]
	 * floats of dim (ntable_dims 0: dim for every table) */
	uint32_t *table_dims, ntable_dims;
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
	struct ps_disk *dk; /* NULL: in RAM */
	/* rows changed since ps_store_clear_changed, one bit a record */
	uint64_t *changed;
	size_t changed_cap; /* in words */
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

/* The row file: unnamed in dir (removed with its last descriptor), or a
 * named file unlinked at once where the file system has no O_TMPFILE. */
static int open_row_file(const char *dir, unsigned shard)
{
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	char path[1100];
	snprintf(path, sizeof(path), "%s/ps-shard%u.rows.XXXXXX", dir, shard);
	fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	unlink(path);
	return fd;
}

/* ram bytes: the read window (an eighth at most), the file's dirty pages
 * (two write-back rounds, a quarter at most), the rest the row cache. */
static int size_disk(struct ps_store *st, uint64_t ram)
{
	struct ps_disk *dk = st->dk;
	size_t win = ram / 8 < WINDOW_BYTES ? (size_t)(ram / 8) : WINDOW_BYTES;
	dk->io_budget = ram / 8 < WRITEBACK_BYTES ? (size_t)(ram / 8) : WRITEBACK_BYTES;
	dk->win_cap = win / st->rec_bytes ? win / st->rec_bytes : 1;
	size_t sets = (size_t)((ram - win - 2 * dk->io_budget) / (2 * st->rec_bytes));
	dk->nsets = sets ? sets : 1;
	dk->slots = aligned_alloc(64, dk->nsets * 2 * st->rec_bytes);
	dk->win = aligned_alloc(64, dk->win_cap * st->rec_bytes);
	dk->crec = malloc(dk->nsets * 2 * sizeof(*dk->crec));
	dk->dirty = calloc(dk->nsets * 2, 1);
	dk->mru = calloc(dk->nsets, 1);
	if (!dk->slots || !dk->win || !dk->crec || !dk->dirty || !dk->mru)
		return -ENOMEM;
	memset(dk->crec, 0xff, dk->nsets * 2 * sizeof(*dk->crec));
	/* rows are read one at a time: read-ahead would only fill the
	 * page cache with cold neighbours */
	posix_fadvise(dk->fd, 0, 0, POSIX_FADV_RANDOM);
	return 0;
}

/* model.dims into the store: row initialisation by table. 0 or -ENOMEM
 * (the store freed). */
static int store_table_dims(struct ps_store *st, const struct esd_job *job)
{
	st->table_dims = malloc(job->ntable_dims * sizeof(*st->table_dims));
	if (!st->table_dims) {
		ps_store_free(st);
		return -ENOMEM;
	}
	memcpy(st->table_dims, job->table_dims, job->ntable_dims * sizeof(*st->table_dims));
	st->ntable_dims = job->ntable_dims;
	return 0;
}

int ps_store_check_padding(const struct ps_store *st, uint64_t key, const float *value,
			   const char *what)
{
	const uint32_t t = esd_key_table(key);
	if (t >= st->ntable_dims)
		return 0;
	for (unsigned i = st->table_dims[t]; i < st->dim; i++) {
		if (value[i] == 0.0f)
			continue;
		ESD_ERR("ps", "%s: row %#llx of table %u has a non-zero float at %u, past the "
			      "table's dim %u in model.dims: it is of a job of other dims",
			what, (unsigned long long)key, t, i, st->table_dims[t]);
		return -EINVAL;
	}
	return 0;
}

int ps_store_create_job(const struct esd_job *job, unsigned shard, struct ps_store **out)
{
	struct ps_store *st;
	int rc = ps_store_create(job->dim, &job->optim, job->seed, &st);
	if (!rc && job->ntable_dims)
		rc = store_table_dims(st, job);
	if (rc || !job->store_dir[0]) {
		*out = rc ? NULL : st;
		return rc;
	}
	struct ps_disk *dk = calloc(1, sizeof(*dk));
	if (!dk) {
		ps_store_free(st);
		return -ENOMEM;
	}
	dk->fd = open_row_file(job->store_dir, shard);
	if (dk->fd < 0) {
		rc = dk->fd;
		ESD_ERR("ps", "ps.store_dir = %s: cannot create the row file of shard %u: %s",
			job->store_dir, shard, strerror(-rc));
		free(dk);
		ps_store_free(st);
		return rc;
	}
	st->dk = dk;
	rc = size_disk(st, job->store_ram_mb << 20);
	if (rc) {
		ps_store_free(st);
		return rc;
	}
	*out = st;
	return 0;
}

size_t ps_store_resident_bytes(const struct ps_store *st)
{
	if (st->dk)
		return (st->dk->nsets * 2 + st->dk->win_cap) * st->rec_bytes + 2 * st->dk->io_budget;
	return st->nchunks * CHUNK_ROWS * st->rec_bytes;
}

void ps_store_free(struct ps_store *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->nchunks; i++)
		free(st->chunks[i]);
	free(st->chunks);
	if (st->dk) {
		close(st->dk->fd);
		free(st->dk->slots);
		free(st->dk->win);
		free(st->dk->crec);
		free(st->dk->dirty);
		free(st->dk->mru);
		free(st->dk);
	}
	free(st->changed);
	free(st->idx_key);
	free(st->idx_rec);
	free(st->stg);
	free(st->grads);
	free(st->tmp);
	free(st->table_dims);
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

/* An I/O error of the row file: logged once, kept, and the row asked for
 * is not served (NULL upstream). */
static void io_failed(struct ps_disk *dk, const char *what, size_t i, ssize_t got)
{
	int e = got < 0 ? errno : EIO;
	if (!dk->err)
		ESD_ERR("ps", "row file: %s of record %zu: %s", what, i,
			got < 0 ? strerror(e) : "short transfer");
	dk->err = -e;
}

/* n more bytes were written to the file: past the budget, wait for the
 * write-back started last time and start it for what was written since,
 * so at most two budgets of the file's pages are dirty at once (a memory
 * cgroup cannot reclaim dirty pages; clean ones it reclaims as any page
 * cache). */
static void io_account(struct ps_disk *dk, size_t n)
{
	dk->io_bytes += n;
	if (dk->io_bytes < dk->io_budget)
		return;
	dk->io_bytes = 0;
	sync_file_range(dk->fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE);
	sync_file_range(dk->fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

static bool in_window(const struct ps_disk *dk, size_t i)
{
	return i >= dk->win0 && i - dk->win0 < dk->win_n;
}

/* Record i from the file (or the window) into dst. */
static int read_rec(const struct ps_store *st, size_t i, char *dst)
{
	struct ps_disk *dk = st->dk;
	if (in_window(dk, i)) {
		memcpy(dst, dk->win + (i - dk->win0) * st->rec_bytes, st->rec_bytes);
		return 0;
	}
	ssize_t got = pread(dk->fd, dst, st->rec_bytes, (off_t)(i * st->rec_bytes));
	if (got != (ssize_t)st->rec_bytes) {
		io_failed(dk, "read", i, got);
		return dk->err;
	}
	return 0;
}

/* Record i from src into the file (and the window when it holds i). */
static int write_rec(const struct ps_store *st, size_t i, const char *src)
{
	struct ps_disk *dk = st->dk;
	if (in_window(dk, i))
		memcpy(dk->win + (i - dk->win0) * st->rec_bytes, src, st->rec_bytes);
	ssize_t got = pwrite(dk->fd, src, st->rec_bytes, (off_t)(i * st->rec_bytes));
	if (got != (ssize_t)st->rec_bytes) {
		io_failed(dk, "write", i, got);
		return dk->err;
	}
	io_account(dk, st->rec_bytes);
	return 0;
}

/* Record i through the window: the run of records from i read in one call
 * when the window does not hold it (a checkpoint walks records in order). */
static char *window_get(const struct ps_store *st, size_t i)
{
	struct ps_disk *dk = st->dk;
	if (!in_window(dk, i)) {
		size_t n = st->count - i < dk->win_cap ? st->count - i : dk->win_cap;
		size_t want = n * st->rec_bytes;
		dk->win_n = 0;
		ssize_t got = pread(dk->fd, dk->win, want, (off_t)(i * st->rec_bytes));
		if (got != (ssize_t)want) {
			io_failed(dk, "read", i, got);
			return NULL;
		}
		dk->win0 = i;
		dk->win_n = n;
	}
	return dk->win + (i - dk->win0) * st->rec_bytes;
}

/* Record i where it is kept in RAM. */
static char *home_of(const struct ps_store *st, size_t i)
{
	return st->chunks[i / CHUNK_ROWS] + (i % CHUNK_ROWS) * st->rec_bytes;
}

static size_t cache_set(const struct ps_disk *dk, size_t i)
{
	return (size_t)(((unsigned __int128)mix(i) * dk->nsets) >> 64);
}

/* The cache way holding record i, or -1. */
static long cache_way(const struct ps_disk *dk, size_t i)
{
	size_t set = cache_set(dk, i);
	for (size_t w = 0; w < 2; w++)
		if (dk->crec[set * 2 + w] == i)
			return (long)(set * 2 + w);
	return -1;
}

/* Record i in the cache: a hit, or the set's least recently used way
 * written back (when changed) and refilled from the file (fresh: a new
 * record, nothing to read). NULL on an I/O error. */
static char *cache_get(const struct ps_store *st, size_t i, bool fresh)
{
	struct ps_disk *dk = st->dk;
	size_t set = cache_set(dk, i);
	long way = cache_way(dk, i);
	if (way < 0) {
		way = (long)(set * 2 + (1u - dk->mru[set]));
		char *slot = dk->slots + (size_t)way * st->rec_bytes;
		if (dk->crec[way] != UINT32_MAX && dk->dirty[way] &&
		    write_rec(st, dk->crec[way], slot))
			return NULL;
		dk->crec[way] = UINT32_MAX;
		if (!fresh && read_rec(st, i, slot))
			return NULL;
		dk->crec[way] = (uint32_t)i;
		dk->dirty[way] = 0;
	}
	dk->mru[set] = (uint8_t)(way & 1);
	return dk->slots + (size_t)way * st->rec_bytes;
}

struct ps_row *ps_store_at(const struct ps_store *st, size_t i)
{
	if (i >= st->count)
		return NULL;
	if (st->dk) {
		long way = cache_way(st->dk, i);
		if (way >= 0)
			return (struct ps_row *)(st->dk->slots + (size_t)way * st->rec_bytes);
		return (struct ps_row *)window_get(st, i);
	}
	return (struct ps_row *)home_of(st, i);
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

/* Chunk c's memory: allocated, or the row file grown by one chunk. The
 * change bitmap grows with it. */
static int add_chunk(struct ps_store *st, size_t c)
{
	size_t words = (c + 1) * (CHUNK_ROWS / 64);
	if (words > st->changed_cap) {
		uint64_t *nw = realloc(st->changed, words * 2 * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		memset(nw + st->changed_cap, 0, (words * 2 - st->changed_cap) * sizeof(*nw));
		st->changed = nw;
		st->changed_cap = words * 2;
	}
	if (!st->dk) {
		st->chunks[c] = aligned_alloc(64, CHUNK_ROWS * st->rec_bytes);
		return st->chunks[c] ? 0 : -ENOMEM;
	}
	/* the file covers every record, so a window read past the last one
	 * written is not short (the file is sparse until then) */
	size_t bytes = (c + 1) * CHUNK_ROWS * st->rec_bytes;
	st->chunks[c] = NULL;
	if (ftruncate(st->dk->fd, (off_t)bytes)) {
		int rc = -errno;
		ESD_ERR("ps", "cannot grow the row file to %zu bytes: %s", bytes, strerror(-rc));
		return rc;
	}
	return 0;
}

/* Record i changed: for the next incremental checkpoint and, when it is
 * cached, for the write-back of its way. */
static inline void mark_changed(struct ps_store *st, size_t i)
{
	st->changed[i / 64] |= 1ull << (i % 64);
	if (st->dk) {
		long way = cache_way(st->dk, i);
		if (way >= 0)
			st->dk->dirty[way] = 1;
	}
}

bool ps_store_changed(const struct ps_store *st, size_t i)
{
	return i < st->count && (st->changed[i / 64] >> (i % 64) & 1);
}

void ps_store_clear_changed(struct ps_store *st)
{
	if (st->changed)
		memset(st->changed, 0, st->changed_cap * sizeof(*st->changed));
}

/* Row of key, created if absent; *rec its record number. overwrite: the
 * caller replaces the whole record, so a row on disk is not read. */
static struct ps_row *get_row(struct ps_store *st, uint64_t key, size_t *rec, bool overwrite)
{
	size_t i = probe(st, key);
	if (st->idx_rec[i]) {
		*rec = st->idx_rec[i] - 1;
		if (!st->dk)
			return (struct ps_row *)home_of(st, *rec);
		struct ps_row *r = (struct ps_row *)cache_get(st, *rec, overwrite);
		if (r && overwrite)
			r->key = key;
		return r;
	}
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
			if (add_chunk(st, c))
				return NULL;
			st->nchunks++;
		}
	}
	size_t n = st->count;
	struct ps_row *r = (struct ps_row *)(st->dk ? cache_get(st, n, true) : home_of(st, n));
	if (!r)
		return NULL;
	r->key = key;
	r->clock = 0;
	const uint32_t t = esd_key_table(key);
	esd_row_init_table(st->seed, key, t < st->ntable_dims ? st->table_dims[t] : st->dim,
			   st->dim, r->data);
	esd_optim_state_init(&st->opt, st->dim, r->data + st->dim);
	st->idx_key[i] = key;
	st->idx_rec[i] = (uint32_t)(n + 1);
	st->count = n + 1;
	*rec = n;
	mark_changed(st, *rec);
	return r;
}

struct ps_row *ps_store_get(struct ps_store *st, uint64_t key)
{
	size_t rec;
	return get_row(st, key, &rec, false);
}

int ps_store_put_value(struct ps_store *st, uint64_t key, uint64_t clock, const float *value,
		       const float *state)
{
	size_t rec;
	struct ps_row *r = get_row(st, key, &rec, !st->state_len || state);
	if (!r)
		return -ENOMEM;
	mark_changed(st, rec);
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
		size_t rec;
		struct ps_row *r = get_row(st, key, &rec, false);
		if (!r)
			return -ENOMEM;
		mark_changed(st, rec);
		esd_optim_apply_sum(&st->opt, st->dim, r->data, r->data + st->dim, st->tmp, r->clock + 1);
		r->clock++;
		updated++;
		i = j;
	}
	st->nstg = 0;
	return updated;
}
