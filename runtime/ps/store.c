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

/* The records of one row length: every table of that dim (model.dims),
 * or every row. Record i of a class is its i-th row created. */
struct ps_class {
	unsigned dim; /* value floats of its rows */
	size_t state_len;
	size_t rec_bytes;
	/* arena */
	char **chunks;
	size_t nchunks, count;
	struct ps_disk *dk; /* NULL: in RAM */
	/* rows changed since ps_store_clear_changed, one bit a record */
	uint64_t *changed;
	size_t changed_cap; /* in words */
};

struct ps_store {
	unsigned dim; /* the largest row */
	size_t state_len;
	struct esd_optim_params opt;
	uint64_t seed;
	/* model.dims: table t's rows have table_dims[t] floats, in class
	 * table_cls[t] (ntable_dims 0: dim for every table, one class) */
	uint32_t *table_dims, ntable_dims;
	uint16_t *table_cls;
	struct ps_class *cls;
	uint32_t ncls;
	uint32_t dim_cls; /* the class of rows of dim floats (tables past model.dims) */
	size_t count;     /* rows of every class */
	/* index: slots hold record number + 1 (0 = empty) in class idx_cls
	 * (NULL with one class) */
	uint64_t *idx_key;
	uint32_t *idx_rec;
	uint16_t *idx_cls;
	size_t idx_cap; /* power of two */
	/* staged gradients */
	struct staged *stg;
	float *grads;
	size_t nstg, stg_cap;
	double *tmp, *tmp_in;
	float *pack; /* a row's state at its dim (ps_store_put_padded) */
};

static inline uint64_t mix(uint64_t k)
{
	return esd_splitmix64(k);
}

/* A class of rows of dim floats (records aligned to 64 bytes). */
static void class_init(const struct ps_store *st, struct ps_class *c, unsigned dim)
{
	c->dim = dim;
	c->state_len = esd_optim_state_len(st->opt.opt, dim);
	c->rec_bytes = sizeof(struct ps_row) + (dim + c->state_len) * sizeof(float);
	c->rec_bytes = (c->rec_bytes + 63) & ~(size_t)63;
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
	st->cls = calloc(1, sizeof(*st->cls));
	if (st->cls)
		class_init(st, &st->cls[0], dim);
	st->ncls = 1;
	st->idx_cap = 1024;
	st->idx_key = calloc(st->idx_cap, sizeof(*st->idx_key));
	st->idx_rec = calloc(st->idx_cap, sizeof(*st->idx_rec));
	st->tmp = calloc(dim, sizeof(double));
	st->tmp_in = calloc(dim, sizeof(double));
	st->pack = malloc((st->state_len + 1) * sizeof(float));
	if (!st->pack || !st->cls || !st->idx_key || !st->idx_rec || !st->tmp || !st->tmp_in) {
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

/* ram bytes for class c's rows: the read window (an eighth at most), the
 * file's dirty pages (two write-back rounds, a quarter at most), the rest
 * the row cache. */
static int size_disk(struct ps_class *c, uint64_t ram)
{
	struct ps_disk *dk = c->dk;
	size_t win = ram / 8 < WINDOW_BYTES ? (size_t)(ram / 8) : WINDOW_BYTES;
	dk->io_budget = ram / 8 < WRITEBACK_BYTES ? (size_t)(ram / 8) : WRITEBACK_BYTES;
	dk->win_cap = win / c->rec_bytes ? win / c->rec_bytes : 1;
	size_t sets = (size_t)((ram - win - 2 * dk->io_budget) / (2 * c->rec_bytes));
	dk->nsets = sets ? sets : 1;
	dk->slots = aligned_alloc(64, dk->nsets * 2 * c->rec_bytes);
	dk->win = aligned_alloc(64, dk->win_cap * c->rec_bytes);
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

/* The class of rows of d floats, added when there is none yet. */
static uint16_t class_of_dim(struct ps_store *st, unsigned d)
{
	for (uint32_t c = 0; c < st->ncls; c++)
		if (st->cls[c].dim == d)
			return (uint16_t)c;
	class_init(st, &st->cls[st->ncls], d);
	return (uint16_t)st->ncls++;
}

/* model.dims into the store: each table's dim and class (one class per
 * distinct dim, the full dim's too, for tables past model.dims). 0 or
 * -ENOMEM (the store freed). */
static int store_table_dims(struct ps_store *st, const struct esd_job *job)
{
	const uint32_t nt = job->ntable_dims;
	struct ps_class *cls = calloc(nt + 1, sizeof(*cls));
	st->table_dims = malloc(nt * sizeof(*st->table_dims));
	st->table_cls = malloc(nt * sizeof(*st->table_cls));
	if (!cls || !st->table_dims || !st->table_cls) {
		free(cls);
		ps_store_free(st);
		return -ENOMEM;
	}
	free(st->cls);
	st->cls = cls;
	st->ncls = 0;
	memcpy(st->table_dims, job->table_dims, nt * sizeof(*st->table_dims));
	st->ntable_dims = nt;
	for (uint32_t t = 0; t < nt; t++)
		st->table_cls[t] = class_of_dim(st, st->table_dims[t]);
	st->dim_cls = class_of_dim(st, st->dim);
	if (st->ncls > 1) {
		st->idx_cls = calloc(st->idx_cap, sizeof(*st->idx_cls));
		if (!st->idx_cls) {
			ps_store_free(st);
			return -ENOMEM;
		}
	}
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

/* Class c's rows in a row file of dir, with ram bytes of RAM. */
static int class_on_disk(struct ps_class *c, const char *dir, unsigned shard, uint64_t ram)
{
	c->dk = calloc(1, sizeof(*c->dk));
	if (!c->dk)
		return -ENOMEM;
	c->dk->fd = open_row_file(dir, shard);
	if (c->dk->fd < 0) {
		int rc = c->dk->fd;
		ESD_ERR("ps", "ps.store_dir = %s: cannot create the row file of shard %u: %s", dir,
			shard, strerror(-rc));
		free(c->dk);
		c->dk = NULL;
		return rc;
	}
	return size_disk(c, ram);
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
	/* ps.store_ram shared evenly between the classes' row files */
	for (uint32_t c = 0; c < st->ncls && !rc; c++)
		rc = class_on_disk(&st->cls[c], job->store_dir, shard,
				   (job->store_ram_mb << 20) / st->ncls);
	if (rc) {
		ps_store_free(st);
		return rc;
	}
	*out = st;
	return 0;
}

size_t ps_store_resident_bytes(const struct ps_store *st)
{
	size_t bytes = 0;
	for (uint32_t i = 0; i < st->ncls; i++) {
		const struct ps_class *c = &st->cls[i];
		if (c->dk)
			bytes += (c->dk->nsets * 2 + c->dk->win_cap) * c->rec_bytes +
				 2 * c->dk->io_budget;
		else
			bytes += c->nchunks * CHUNK_ROWS * c->rec_bytes;
	}
	return bytes;
}

static void class_free(struct ps_class *c)
{
	for (size_t i = 0; i < c->nchunks; i++)
		free(c->chunks[i]);
	free(c->chunks);
	if (c->dk) {
		close(c->dk->fd);
		free(c->dk->slots);
		free(c->dk->win);
		free(c->dk->crec);
		free(c->dk->dirty);
		free(c->dk->mru);
		free(c->dk);
	}
	free(c->changed);
}

void ps_store_free(struct ps_store *st)
{
	if (!st)
		return;
	for (uint32_t c = 0; st->cls && c < st->ncls; c++)
		class_free(&st->cls[c]);
	free(st->cls);
	free(st->idx_key);
	free(st->idx_rec);
	free(st->idx_cls);
	free(st->stg);
	free(st->grads);
	free(st->tmp);
	free(st->table_dims);
	free(st->table_cls);
	free(st->tmp_in);
	free(st->pack);
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

/* Record i of class c from the file (or the window) into dst. */
static int read_rec(const struct ps_class *c, size_t i, char *dst)
{
	struct ps_disk *dk = c->dk;
	if (in_window(dk, i)) {
		memcpy(dst, dk->win + (i - dk->win0) * c->rec_bytes, c->rec_bytes);
		return 0;
	}
	ssize_t got = pread(dk->fd, dst, c->rec_bytes, (off_t)(i * c->rec_bytes));
	if (got != (ssize_t)c->rec_bytes) {
		io_failed(dk, "read", i, got);
		return dk->err;
	}
	return 0;
}

/* Record i of class c from src into the file (and the window when it
 * holds i). */
static int write_rec(const struct ps_class *c, size_t i, const char *src)
{
	struct ps_disk *dk = c->dk;
	if (in_window(dk, i))
		memcpy(dk->win + (i - dk->win0) * c->rec_bytes, src, c->rec_bytes);
	ssize_t got = pwrite(dk->fd, src, c->rec_bytes, (off_t)(i * c->rec_bytes));
	if (got != (ssize_t)c->rec_bytes) {
		io_failed(dk, "write", i, got);
		return dk->err;
	}
	io_account(dk, c->rec_bytes);
	return 0;
}

/* Record i through the window: the run of records from i read in one call
 * when the window does not hold it (a checkpoint walks records in order). */
static char *window_get(const struct ps_class *c, size_t i)
{
	struct ps_disk *dk = c->dk;
	if (!in_window(dk, i)) {
		size_t n = c->count - i < dk->win_cap ? c->count - i : dk->win_cap;
		size_t want = n * c->rec_bytes;
		dk->win_n = 0;
		ssize_t got = pread(dk->fd, dk->win, want, (off_t)(i * c->rec_bytes));
		if (got != (ssize_t)want) {
			io_failed(dk, "read", i, got);
			return NULL;
		}
		dk->win0 = i;
		dk->win_n = n;
	}
	return dk->win + (i - dk->win0) * c->rec_bytes;
}

/* Record i where it is kept in RAM. */
static char *home_of(const struct ps_class *c, size_t i)
{
	return c->chunks[i / CHUNK_ROWS] + (i % CHUNK_ROWS) * c->rec_bytes;
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
static char *cache_get(const struct ps_class *c, size_t i, bool fresh)
{
	struct ps_disk *dk = c->dk;
	size_t set = cache_set(dk, i);
	long way = cache_way(dk, i);
	if (way < 0) {
		way = (long)(set * 2 + (1u - dk->mru[set]));
		char *slot = dk->slots + (size_t)way * c->rec_bytes;
		if (dk->crec[way] != UINT32_MAX && dk->dirty[way] &&
		    write_rec(c, dk->crec[way], slot))
			return NULL;
		dk->crec[way] = UINT32_MAX;
		if (!fresh && read_rec(c, i, slot))
			return NULL;
		dk->crec[way] = (uint32_t)i;
		dk->dirty[way] = 0;
	}
	dk->mru[set] = (uint8_t)(way & 1);
	return dk->slots + (size_t)way * c->rec_bytes;
}

/* Record i of class c, not created. */
static struct ps_row *class_at(const struct ps_class *c, size_t i)
{
	if (i >= c->count)
		return NULL;
	if (c->dk) {
		long way = cache_way(c->dk, i);
		if (way >= 0)
			return (struct ps_row *)(c->dk->slots + (size_t)way * c->rec_bytes);
		return (struct ps_row *)window_get(c, i);
	}
	return (struct ps_row *)home_of(c, i);
}

/* Row i of the store (classes one after another) as its class and record
 * there: false past the end. */
static bool locate(const struct ps_store *st, size_t i, uint32_t *cls, size_t *rec)
{
	for (uint32_t c = 0; c < st->ncls; c++) {
		if (i < st->cls[c].count) {
			*cls = c;
			*rec = i;
			return true;
		}
		i -= st->cls[c].count;
	}
	return false;
}

struct ps_row *ps_store_at(const struct ps_store *st, size_t i)
{
	uint32_t c;
	size_t rec;
	return locate(st, i, &c, &rec) ? class_at(&st->cls[c], rec) : NULL;
}

static size_t probe(const struct ps_store *st, uint64_t key)
{
	size_t mask = st->idx_cap - 1, i = mix(key) & mask;
	while (st->idx_rec[i] && st->idx_key[i] != key)
		i = (i + 1) & mask;
	return i;
}

/* The class of key's rows. */
static uint32_t class_of_key(const struct ps_store *st, uint64_t key)
{
	const uint32_t t = esd_key_table(key);
	return t < st->ntable_dims ? st->table_cls[t] : st->dim_cls;
}

unsigned ps_store_key_dim(const struct ps_store *st, uint64_t key)
{
	return st->cls[class_of_key(st, key)].dim;
}

struct ps_row *ps_store_find(const struct ps_store *st, uint64_t key)
{
	size_t i = probe(st, key);
	if (!st->idx_rec[i])
		return NULL;
	return class_at(&st->cls[st->idx_cls ? st->idx_cls[i] : 0], st->idx_rec[i] - 1);
}

static int grow_index(struct ps_store *st)
{
	size_t ncap = st->idx_cap * 2;
	uint64_t *nk = calloc(ncap, sizeof(*nk));
	uint32_t *nr = calloc(ncap, sizeof(*nr));
	uint16_t *nc = st->idx_cls ? calloc(ncap, sizeof(*nc)) : NULL;
	if (!nk || !nr || (st->idx_cls && !nc)) {
		free(nk);
		free(nr);
		free(nc);
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
		if (nc)
			nc[j] = st->idx_cls[i];
	}
	free(st->idx_key);
	free(st->idx_rec);
	free(st->idx_cls);
	st->idx_key = nk;
	st->idx_rec = nr;
	st->idx_cls = nc;
	st->idx_cap = ncap;
	return 0;
}

/* Chunk k of class c's memory: allocated, or the row file grown by one
 * chunk. The change bitmap grows with it. */
static int add_chunk(struct ps_class *c, size_t k)
{
	size_t words = (k + 1) * (CHUNK_ROWS / 64);
	if (words > c->changed_cap) {
		uint64_t *nw = realloc(c->changed, words * 2 * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		memset(nw + c->changed_cap, 0, (words * 2 - c->changed_cap) * sizeof(*nw));
		c->changed = nw;
		c->changed_cap = words * 2;
	}
	if (!c->dk) {
		c->chunks[k] = aligned_alloc(64, CHUNK_ROWS * c->rec_bytes);
		return c->chunks[k] ? 0 : -ENOMEM;
	}
	/* the file covers every record, so a window read past the last one
	 * written is not short (the file is sparse until then) */
	size_t bytes = (k + 1) * CHUNK_ROWS * c->rec_bytes;
	c->chunks[k] = NULL;
	if (ftruncate(c->dk->fd, (off_t)bytes)) {
		int rc = -errno;
		ESD_ERR("ps", "cannot grow the row file to %zu bytes: %s", bytes, strerror(-rc));
		return rc;
	}
	return 0;
}

/* Record i of class c changed: for the next incremental checkpoint and,
 * when it is cached, for the write-back of its way. */
static inline void mark_changed(struct ps_class *c, size_t i)
{
	c->changed[i / 64] |= 1ull << (i % 64);
	if (c->dk) {
		long way = cache_way(c->dk, i);
		if (way >= 0)
			c->dk->dirty[way] = 1;
	}
}

bool ps_store_changed(const struct ps_store *st, size_t i)
{
	uint32_t c;
	size_t rec;
	return locate(st, i, &c, &rec) && (st->cls[c].changed[rec / 64] >> (rec % 64) & 1);
}

void ps_store_clear_changed(struct ps_store *st)
{
	for (uint32_t c = 0; c < st->ncls; c++)
		if (st->cls[c].changed)
			memset(st->cls[c].changed, 0,
			       st->cls[c].changed_cap * sizeof(*st->cls[c].changed));
}

/* A new record of class c: its memory (a chunk added when the last is
 * full). NULL on -ENOMEM or an I/O error. */
static struct ps_row *new_record(struct ps_class *c)
{
	if (c->count == UINT32_MAX - 1)
		return NULL;
	if (c->count % CHUNK_ROWS == 0) {
		size_t k = c->count / CHUNK_ROWS;
		if (k == c->nchunks) {
			char **nc = realloc(c->chunks, (k + 1) * sizeof(*nc));
			if (!nc)
				return NULL;
			c->chunks = nc;
			if (add_chunk(c, k))
				return NULL;
			c->nchunks++;
		}
	}
	return (struct ps_row *)(c->dk ? cache_get(c, c->count, true) : home_of(c, c->count));
}

/* Row of key, created if absent; *cls its class, *rec its record number
 * there. overwrite: the caller replaces the whole record, so a row on
 * disk is not read. */
static struct ps_row *get_row(struct ps_store *st, uint64_t key, struct ps_class **cls,
			      size_t *rec, bool overwrite)
{
	size_t i = probe(st, key);
	if (st->idx_rec[i]) {
		struct ps_class *c = &st->cls[st->idx_cls ? st->idx_cls[i] : 0];
		*cls = c;
		*rec = st->idx_rec[i] - 1;
		if (!c->dk)
			return (struct ps_row *)home_of(c, *rec);
		struct ps_row *r = (struct ps_row *)cache_get(c, *rec, overwrite);
		if (r && overwrite)
			r->key = key;
		return r;
	}
	if ((st->count + 1) * 2 > st->idx_cap) {
		if (grow_index(st))
			return NULL;
		i = probe(st, key);
	}
	const uint32_t ci = class_of_key(st, key);
	struct ps_class *c = &st->cls[ci];
	struct ps_row *r = new_record(c);
	if (!r)
		return NULL;
	r->key = key;
	r->clock = 0;
	esd_row_init_table(st->seed, key, c->dim, c->dim, r->data);
	esd_optim_state_init(&st->opt, c->dim, r->data + c->dim);
	st->idx_key[i] = key;
	st->idx_rec[i] = (uint32_t)(c->count + 1);
	if (st->idx_cls)
		st->idx_cls[i] = (uint16_t)ci;
	*cls = c;
	*rec = c->count++;
	st->count++;
	mark_changed(c, *rec);
	return r;
}

struct ps_row *ps_store_get(struct ps_store *st, uint64_t key)
{
	struct ps_class *c;
	size_t rec;
	return get_row(st, key, &c, &rec, false);
}

int ps_store_put_value(struct ps_store *st, uint64_t key, uint64_t clock, const float *value,
		       const float *state)
{
	struct ps_class *c;
	size_t rec;
	struct ps_row *r = get_row(st, key, &c, &rec, !st->state_len || state);
	if (!r)
		return -ENOMEM;
	mark_changed(c, rec);
	memcpy(r->data, value, c->dim * sizeof(float));
	if (c->state_len && state)
		memcpy(r->data + c->dim, state, c->state_len * sizeof(float));
	r->clock = clock;
	return 0;
}

int ps_store_put_padded(struct ps_store *st, uint64_t key, uint64_t clock, const float *value,
			const float *state)
{
	const unsigned d = ps_store_key_dim(st, key);
	if (d == st->dim)
		return ps_store_put_value(st, key, clock, value, state);
	const size_t sf = st->state_len / st->dim;
	for (size_t b = 0; state && b < sf; b++) /* each state block's first d floats */
		memcpy(st->pack + b * d, state + b * st->dim, d * sizeof(float));
	return ps_store_put_value(st, key, clock, value, state ? st->pack : NULL);
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
	memcpy(st->grads + (size_t)st->nstg * st->dim, grad,
	       ps_store_key_dim(st, key) * sizeof(float));
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
		const unsigned d = ps_store_key_dim(st, key);
		memset(st->tmp, 0, d * sizeof(double));
		for (; j < st->nstg && st->stg[j].key == key; j++) {
			if (j > i && st->stg[j].worker == st->stg[j - 1].worker)
				return -EEXIST; /* dedup upstream failed: refuse to double-apply */
			const float *g = st->grads + (size_t)st->stg[j].off * st->dim;
			for (unsigned k = 0; k < d; k++)
				st->tmp_in[k] = g[k];
			esd_optim_grad_add(d, st->tmp, st->tmp_in);
		}
		struct ps_class *c;
		size_t rec;
		struct ps_row *r = get_row(st, key, &c, &rec, false);
		if (!r)
			return -ENOMEM;
		mark_changed(c, rec);
		esd_optim_apply_sum(&st->opt, d, r->data, r->data + d, st->tmp, r->clock + 1);
		r->clock++;
		updated++;
		i = j;
	}
	st->nstg = 0;
	return updated;
}
