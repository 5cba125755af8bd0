/*
 * Checkpoint writer: rows streamed through a buffer into a temporary file
 * next to the target, then trailer, final header, fsync, rename, fsync of
 * the directory (esd/ckpt.h "Atomicity"). The body checksum is computed
 * as the bytes go out, so nothing is read back. Each buffer written is
 * handed to write-back at once and the one before it waited for and
 * dropped from the page cache: a checkpoint larger than the writer's
 * memory limit (a shard in a memory cgroup) never holds more than two
 * buffers of the file's pages.
 */
#include "ckpt_format.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include <esd/err.h>

#define WBUF_SIZE (1u << 20)

struct esd_ckpt_writer {
	int fd;
	int failed; /* an I/O error happened: only abort is left */
	char *path; /* target */
	char *tmp;  /* temporary beside it */
	char *dir;  /* directory of both */
	struct esd_ckpt_meta meta;
	uint32_t sf;
	uint64_t rows;
	/* version 2: the table dims (meta.table_dims points here), rows per
	 * table and the table block as written at commit */
	uint32_t *tdims;
	uint64_t *trows;
	unsigned char *tblock;
	int have_prev;
	esd_key_t prev_key;
	int sorted;
	int dense_done;
	XXH64_state_t *body;
	unsigned char *buf;
	size_t used;
	off_t written; /* file bytes written so far (header included) */
	unsigned char header[ESD_CKPT_HEADER_SIZE];
};

uint64_t esd_ckpt_hash(const void *p, size_t n)
{
	return XXH64(p, n, 0);
}

static int write_all(int fd, const void *p, size_t n)
{
	const unsigned char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return esd_neg_errno();
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
	const unsigned char *c = p;
	while (n) {
		ssize_t w = pwrite(fd, c, n, off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return esd_neg_errno();
		}
		c += w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

/* The buffer's bytes went out at [at, at + n): start their write-back;
 * wait for the previous buffer's and drop its pages. */
static void stream_out(int fd, off_t at, size_t n)
{
	sync_file_range(fd, at, (off_t)n, SYNC_FILE_RANGE_WRITE);
	if (at >= (off_t)WBUF_SIZE) {
		off_t prev = at - (off_t)WBUF_SIZE;
		sync_file_range(fd, prev, WBUF_SIZE,
				SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
					SYNC_FILE_RANGE_WAIT_AFTER);
		posix_fadvise(fd, prev, WBUF_SIZE, POSIX_FADV_DONTNEED);
	}
}

static int flush(struct esd_ckpt_writer *w)
{
	int rc = write_all(w->fd, w->buf, w->used);
	if (!rc)
		stream_out(w->fd, w->written, w->used);
	w->written += (off_t)w->used;
	w->used = 0;
	if (rc)
		w->failed = 1;
	return rc;
}

/* Append body bytes: hashed, buffered. */
static int emit(struct esd_ckpt_writer *w, const void *p, size_t n)
{
	const unsigned char *c = p;
	XXH64_update(w->body, p, n);
	while (n) {
		size_t room = WBUF_SIZE - w->used;
		size_t k = n < room ? n : room;
		memcpy(w->buf + w->used, c, k);
		w->used += k;
		c += k;
		n -= k;
		if (w->used == WBUF_SIZE) {
			int rc = flush(w);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* Version 2's table block: each table's dim and rows written so far. */
static void encode_tables(struct esd_ckpt_writer *w)
{
	for (uint32_t t = 0; t < w->meta.ntables; t++) {
		unsigned char *e = w->tblock + (size_t)t * CKPT_TABLE_ENTRY;
		esd_put_le32(e, w->tdims[t]);
		esd_put_le32(e + 4, 0);
		esd_put_le64(e + 8, w->trows[t]);
	}
}

static void encode_header(struct esd_ckpt_writer *w)
{
	unsigned char *h = w->header;
	const uint32_t nt = w->meta.ntables;
	memset(h, 0, ESD_CKPT_HEADER_SIZE);
	memcpy(h + H_MAGIC, CKPT_MAGIC, 8);
	esd_put_le32(h + H_VERSION, nt ? ESD_CKPT_VERSION : ESD_CKPT_VERSION_PADDED);
	esd_put_le32(h + H_HSIZE, ESD_CKPT_HEADER_SIZE);
	esd_put_le64(h + H_SEED, w->meta.seed);
	esd_put_le64(h + H_ITER, w->meta.iteration);
	esd_put_le64(h + H_CURSOR, w->meta.data_cursor);
	esd_put_le64(h + H_ROWS, w->rows);
	esd_put_le64(h + H_DENSE, w->meta.dense_len);
	esd_put_le64(h + H_DCLOCK, w->meta.dense_clock);
	esd_put_le32(h + H_DIM, w->meta.dim);
	esd_put_le32(h + H_OPT, (uint32_t)w->meta.optimizer);
	esd_put_le32(h + H_SF, w->sf);
	esd_put_le32(h + H_SHARD, w->meta.shard);
	esd_put_le32(h + H_NSHARDS, w->meta.nshards);
	esd_put_le32(h + H_FLAGS, (w->sorted ? ESD_CKPT_FLAG_SORTED : 0) |
	                          (w->meta.increment ? ESD_CKPT_FLAG_INCR : 0));
	if (w->meta.increment) {
		esd_put_le64(h + H_PARENT_ITER, w->meta.parent_iteration);
		esd_put_le64(h + H_PARENT_SUM, w->meta.parent_sum);
	}
	if (nt) {
		encode_tables(w);
		esd_put_le32(h + H_NTABLES, nt);
		esd_put_le64(h + H_TABSUM, esd_ckpt_hash(w->tblock, (size_t)nt * CKPT_TABLE_ENTRY));
	}
	esd_put_le64(h + H_SUM, esd_ckpt_hash(h, H_SUM));
}

static int split_path(const char *path, char **dir, char **base)
{
	const char *slash = strrchr(path, '/');
	const char *b = slash ? slash + 1 : path;
	if (!*b || !strcmp(b, ".") || !strcmp(b, ".."))
		return -EINVAL;
	if (slash)
		*dir = slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
	else
		*dir = strdup(".");
	*base = strdup(b);
	if (!*dir || !*base) {
		free(*dir);
		free(*base);
		return -ENOMEM;
	}
	return 0;
}

/* meta's table dims: each 1..dim, at most ESD_CKPT_MAX_TABLES. */
static bool tables_ok(const struct esd_ckpt_meta *meta)
{
	if (!meta->ntables)
		return true;
	if (meta->ntables > ESD_CKPT_MAX_TABLES || !meta->table_dims)
		return false;
	for (uint32_t t = 0; t < meta->ntables; t++)
		if (meta->table_dims[t] < 1 || meta->table_dims[t] > meta->dim)
			return false;
	return true;
}

/* The writer's own copy of the table dims and its row counters. */
static int copy_tables(struct esd_ckpt_writer *w)
{
	const size_t nt = w->meta.ntables;
	if (!nt)
		return 0;
	w->tdims = malloc(nt * sizeof(*w->tdims));
	w->trows = calloc(nt, sizeof(*w->trows));
	w->tblock = malloc(nt * CKPT_TABLE_ENTRY);
	if (!w->tdims || !w->trows || !w->tblock)
		return -ENOMEM;
	memcpy(w->tdims, w->meta.table_dims, nt * sizeof(*w->tdims));
	w->meta.table_dims = w->tdims;
	return 0;
}

int esd_ckpt_writer_open(const char *path, const struct esd_ckpt_meta *meta,
                         struct esd_ckpt_writer **out)
{
	struct esd_ckpt_writer *w;
	char *base = NULL;
	int rc;

	if (!path || !meta || !out || meta->dim < 1 || meta->dim > ESD_CKPT_MAX_DIM ||
	    meta->optimizer > ESD_OPT_ADAM || meta->nshards < 1 || meta->shard >= meta->nshards ||
	    !tables_ok(meta))
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = -1;
	w->meta = *meta;
	w->sf = esd_optimizer_state_floats(meta->optimizer);
	w->sorted = 1;
	rc = copy_tables(w);
	if (!rc)
		rc = split_path(path, &w->dir, &base);
	if (rc)
		goto err_free;
	rc = -ENOMEM;
	w->path = strdup(path);
	if (!w->path || asprintf(&w->tmp, "%s/.%s.tmp.XXXXXX", w->dir, base) < 0) {
		w->tmp = NULL;
		goto err_free;
	}
	w->buf = malloc(WBUF_SIZE);
	w->body = XXH64_createState();
	if (!w->buf || !w->body)
		goto err_free;
	XXH64_reset(w->body, 0);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		rc = esd_neg_errno();
		goto err_free;
	}
	/* provisional header and table block (row counts 0); the final ones
	 * are written at commit */
	encode_header(w);
	rc = write_all(w->fd, w->header, ESD_CKPT_HEADER_SIZE);
	if (!rc && w->meta.ntables)
		rc = write_all(w->fd, w->tblock, (size_t)w->meta.ntables * CKPT_TABLE_ENTRY);
	w->written = ESD_CKPT_HEADER_SIZE + (off_t)w->meta.ntables * CKPT_TABLE_ENTRY;
	if (rc)
		goto err_unlink;
	free(base);
	*out = w;
	return 0;

err_unlink:
	close(w->fd);
	w->fd = -1;
	unlink(w->tmp);
err_free:
	free(base);
	free(w->tdims);
	free(w->trows);
	free(w->tblock);
	XXH64_freeState(w->body);
	free(w->buf);
	free(w->tmp);
	free(w->path);
	free(w->dir);
	free(w);
	return rc;
}

/* Whether a row may be appended (key after the previous, not a duplicate,
 * before the dense table, of a known table): 0 or -errno. */
static int row_ok(struct esd_ckpt_writer *w, esd_key_t key, const float *value,
                  const float *state)
{
	if (!w || w->failed || w->dense_done || !value || (w->sf && !state))
		return w && w->failed ? -EIO : -EINVAL;
	if (w->have_prev && key == w->prev_key)
		return -EINVAL;
	if (w->meta.ntables && esd_key_table(key) >= w->meta.ntables)
		return -EINVAL;
	return 0;
}

/* Key and clock of the row being appended. */
static int emit_key(struct esd_ckpt_writer *w, esd_key_t key, uint64_t clock)
{
	unsigned char kc[16];
	if (w->have_prev && key < w->prev_key)
		w->sorted = 0;
	esd_put_le64(kc, key);
	esd_put_le64(kc + 8, clock);
	return emit(w, kc, sizeof(kc));
}

static void row_done(struct esd_ckpt_writer *w, esd_key_t key)
{
	w->have_prev = 1;
	w->prev_key = key;
	w->rows++;
	if (w->meta.ntables)
		w->trows[esd_key_table(key)]++;
}

/* The floats of value[dim] past d are 0 (the state's past d, which a
 * padded row's optimizer never touched, are dropped). */
static bool tail_zero(const struct esd_ckpt_writer *w, uint32_t d, const float *value)
{
	for (uint32_t i = d; i < w->meta.dim; i++)
		if (value[i] != 0.0f)
			return false;
	return true;
}

int esd_ckpt_write_row(struct esd_ckpt_writer *w, esd_key_t key, uint64_t clock, const float *value,
                       const float *state)
{
	int rc = row_ok(w, key, value, state);
	if (rc)
		return rc;
	const uint32_t dim = w->meta.dim;
	const uint32_t d = w->meta.ntables ? w->tdims[esd_key_table(key)] : dim;
	if (d < dim && !tail_zero(w, d, value))
		return -EINVAL;
	rc = emit_key(w, key, clock);
	if (!rc)
		rc = emit(w, value, (size_t)d * sizeof(float));
	for (uint32_t b = 0; b < w->sf && !rc; b++)
		rc = emit(w, state + (size_t)b * dim, (size_t)d * sizeof(float));
	if (rc)
		return rc;
	row_done(w, key);
	return 0;
}

int esd_ckpt_write_row_packed(struct esd_ckpt_writer *w, esd_key_t key, uint64_t clock,
                              const float *value, const float *state)
{
	int rc = row_ok(w, key, value, state);
	if (rc)
		return rc;
	const uint32_t d = w->meta.ntables ? w->tdims[esd_key_table(key)] : w->meta.dim;
	rc = emit_key(w, key, clock);
	if (!rc)
		rc = emit(w, value, (size_t)d * sizeof(float));
	if (!rc && w->sf)
		rc = emit(w, state, (size_t)d * w->sf * sizeof(float));
	if (rc)
		return rc;
	row_done(w, key);
	return 0;
}

int esd_ckpt_write_rows(struct esd_ckpt_writer *w, size_t n, const esd_key_t *keys,
                        const uint64_t *clocks, const float *values, const float *states)
{
	if (!w || (n && (!keys || !clocks || !values || (w->sf && !states))))
		return -EINVAL;
	const size_t dim = w->meta.dim, sl = dim * w->sf;
	for (size_t i = 0; i < n; i++) {
		int rc = esd_ckpt_write_row(w, keys[i], clocks[i], values + i * dim,
		                            w->sf ? states + i * sl : NULL);
		if (rc)
			return rc;
	}
	return 0;
}

int esd_ckpt_write_dense(struct esd_ckpt_writer *w, const float *dense, const float *state)
{
	int rc;
	if (!w || w->failed || w->dense_done || !w->meta.dense_len || !dense || (w->sf && !state))
		return w && w->failed ? -EIO : -EINVAL;
	rc = emit(w, dense, w->meta.dense_len * sizeof(float));
	if (!rc && w->sf)
		rc = emit(w, state, w->meta.dense_len * w->sf * sizeof(float));
	if (rc)
		return rc;
	w->dense_done = 1;
	return 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = 0;
	if (fd < 0)
		return esd_neg_errno();
	if (fsync(fd))
		rc = esd_neg_errno();
	close(fd);
	return rc;
}

static void writer_free(struct esd_ckpt_writer *w)
{
	free(w->tdims);
	free(w->trows);
	free(w->tblock);
	XXH64_freeState(w->body);
	free(w->buf);
	free(w->tmp);
	free(w->path);
	free(w->dir);
	free(w);
}

int esd_ckpt_writer_commit(struct esd_ckpt_writer *w)
{
	unsigned char t[ESD_CKPT_TRAILER_SIZE];
	int rc;
	if (!w)
		return -EINVAL;
	if (w->failed) {
		rc = -EIO;
		goto err_abort;
	}
	if (w->meta.dense_len && !w->dense_done) {
		rc = -EINVAL;
		goto err_abort;
	}
	rc = flush(w);
	if (rc)
		goto err_abort;
	encode_header(w);
	memset(t, 0, sizeof(t));
	memcpy(t + T_MAGIC, CKPT_TRAILER_MAGIC, 8);
	esd_put_le64(t + T_ROWS, w->rows);
	esd_put_le64(t + T_DENSE, w->meta.dense_len);
	esd_put_le64(t + T_BODYSUM, XXH64_digest(w->body));
	esd_put_le64(t + T_HDRSUM, esd_get_le64(w->header + H_SUM));
	esd_put_le64(t + T_SUM, esd_ckpt_hash(t, T_SUM));
	rc = write_all(w->fd, t, sizeof(t));
	if (!rc)
		rc = pwrite_all(w->fd, w->header, ESD_CKPT_HEADER_SIZE, 0);
	if (!rc && w->meta.ntables)
		rc = pwrite_all(w->fd, w->tblock, (size_t)w->meta.ntables * CKPT_TABLE_ENTRY,
		                ESD_CKPT_HEADER_SIZE);
	if (rc)
		goto err_abort;
	if (fsync(w->fd)) {
		rc = esd_neg_errno();
		goto err_abort;
	}
	if (close(w->fd)) {
		w->fd = -1;
		rc = esd_neg_errno();
		goto err_abort;
	}
	w->fd = -1;
	if (rename(w->tmp, w->path)) {
		rc = esd_neg_errno();
		goto err_abort;
	}
	rc = fsync_dir(w->dir);
	writer_free(w);
	return rc;

err_abort:
	esd_ckpt_writer_abort(w);
	return rc;
}

void esd_ckpt_writer_abort(struct esd_ckpt_writer *w)
{
	if (!w)
		return;
	if (w->fd >= 0)
		close(w->fd);
	unlink(w->tmp);
	writer_free(w);
}

int esd_ckpt_remove_temps(const char *path)
{
	char *dir = NULL, *base = NULL, *prefix = NULL;
	DIR *d;
	struct dirent *e;
	int rc, n = 0;
	if (!path)
		return -EINVAL;
	rc = split_path(path, &dir, &base);
	if (rc)
		return rc;
	if (asprintf(&prefix, ".%s.tmp.", base) < 0) {
		rc = -ENOMEM;
		goto out_free;
	}
	d = opendir(dir);
	if (!d) {
		rc = esd_neg_errno();
		goto out_free;
	}
	size_t pl = strlen(prefix);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, pl) || strlen(e->d_name) != pl + 6)
			continue;
		if (!unlinkat(dirfd(d), e->d_name, 0))
			n++;
	}
	closedir(d);
	rc = n;
out_free:
	free(prefix);
	free(dir);
	free(base);
	return rc;
}
