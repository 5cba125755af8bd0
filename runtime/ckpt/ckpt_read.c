/*
 * Checkpoint reader: validates a whole file before anything in it is
 * used (esd/ckpt.h "Validation"), then streams rows to a callback. Every
 * refusal names what is wrong and the byte offset, because an operator
 * deciding whether to restart a PS from this file needs to know.
 */
#include "ckpt_format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <esd/err.h>

#define RBUF_MIN (1u << 20)

struct esd_ckpt_reader {
	int fd;
	struct esd_ckpt_info info;
	uint32_t sf;
	uint32_t version;
	uint64_t rec;       /* bytes of a row record (version 2: the largest) */
	uint64_t cur_off;   /* offset of the record being delivered */
	/* version 2: each table's dim (info.meta.table_dims) and rows here */
	uint32_t *tdims;
	uint64_t *trows;
	float *pad; /* a row padded to dim (version 2) */
	uint64_t rows_off;  /* start of rows */
	uint64_t dense_off; /* start of the dense section */
	uint64_t trailer_off;
	uint64_t body_sum; /* from the trailer */
	uint64_t file_rows; /* rows in this file (info.row_count: of the chain) */
	unsigned char *buf;
	size_t bufsize; /* a whole number of records, >= RBUF_MIN */
	/* an increment: its parents, newest first, the base last */
	struct esd_ckpt_reader *chain[ESD_CKPT_MAX_CHAIN];
	uint32_t nchain;
	struct key_map *map; /* key -> newest version, built at open */
};

static int fail(struct esd_ckpt_error *err, int code, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(struct esd_ckpt_error *err, int code, uint64_t off, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		err->code = code;
		err->offset = off;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return code;
}

static int pread_all(int fd, void *p, size_t n, uint64_t off)
{
	unsigned char *c = p;
	while (n) {
		ssize_t r = pread(fd, c, n, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return esd_neg_errno();
		}
		if (r == 0)
			return -ENODATA; /* shrank under us */
		c += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Version 2's table block (after the header): each table's dim and rows,
 * checked against the header. */
static int read_tables(struct esd_ckpt_reader *r, const unsigned char *h,
                       struct esd_ckpt_error *err)
{
	struct esd_ckpt_meta *m = &r->info.meta;
	const uint32_t nt = esd_get_le32(h + H_NTABLES);
	if (nt < 1 || nt > ESD_CKPT_MAX_TABLES || esd_get_le32(h + H_NTABLES + 4))
		return fail(err, -EBADMSG, H_NTABLES, "%u tables, expected 1..%u", nt,
		            ESD_CKPT_MAX_TABLES);
	const size_t bytes = (size_t)nt * CKPT_TABLE_ENTRY;
	unsigned char *b = malloc(bytes);
	r->tdims = malloc(nt * sizeof(*r->tdims));
	r->trows = malloc(nt * sizeof(*r->trows));
	if (!b || !r->tdims || !r->trows) {
		free(b);
		return fail(err, -ENOMEM, 0, "out of memory");
	}
	int rc = pread_all(r->fd, b, bytes, ESD_CKPT_HEADER_SIZE);
	if (rc) {
		free(b);
		return fail(err, rc, ESD_CKPT_HEADER_SIZE, "read of the table block failed: %s",
		            esd_strerror(rc));
	}
	if (esd_ckpt_hash(b, bytes) != esd_get_le64(h + H_TABSUM)) {
		free(b);
		return fail(err, -ESD_EBADSUM, ESD_CKPT_HEADER_SIZE,
		            "table block checksum mismatch over bytes [%u, %zu)",
		            ESD_CKPT_HEADER_SIZE, ESD_CKPT_HEADER_SIZE + bytes);
	}
	uint64_t rows = 0;
	for (uint32_t t = 0; t < nt && !rc; t++) {
		const unsigned char *e = b + (size_t)t * CKPT_TABLE_ENTRY;
		r->tdims[t] = esd_get_le32(e);
		r->trows[t] = esd_get_le64(e + 8);
		if (r->tdims[t] < 1 || r->tdims[t] > m->dim || esd_get_le32(e + 4))
			rc = fail(err, -EBADMSG, ESD_CKPT_HEADER_SIZE + t * CKPT_TABLE_ENTRY,
			          "table %u has dim %u, expected 1..%u", t, r->tdims[t], m->dim);
		else if (r->trows[t] > UINT64_MAX / 2 - rows)
			rc = fail(err, -EBADMSG, ESD_CKPT_HEADER_SIZE + t * CKPT_TABLE_ENTRY + 8,
			          "table %u: %" PRIu64 " rows", t, r->trows[t]);
		rows += r->trows[t];
	}
	free(b);
	if (!rc && rows != r->info.row_count)
		rc = fail(err, -EBADMSG, H_ROWS,
		          "header says %" PRIu64 " rows, its tables %" PRIu64, r->info.row_count, rows);
	m->ntables = nt;
	m->table_dims = r->tdims;
	return rc;
}

/* Bytes of a row record of dim d. */
static uint64_t rec_of(const struct esd_ckpt_reader *r, uint32_t d)
{
	return ckpt_record_size(d, r->sf);
}

/* The size follows from the header (and table block): check it before
 * reading on. */
static int check_size(struct esd_ckpt_reader *r, uint64_t size, struct esd_ckpt_error *err)
{
	const struct esd_ckpt_meta *m = &r->info.meta;
	const uint64_t max = UINT64_MAX / 4;
	r->rec = rec_of(r, m->dim);
	if (r->info.row_count > max / r->rec || m->dense_len > max / (4 * (1 + (uint64_t)r->sf)))
		return fail(err, -EBADMSG, H_ROWS,
		            "counts too large (%" PRIu64 " rows, %" PRIu64 " dense floats)",
		            r->info.row_count, m->dense_len);
	/* the bound above holds every table's rows at the largest record */
	uint64_t row_bytes = r->info.row_count * r->rec;
	if (m->ntables) {
		row_bytes = 0;
		for (uint32_t t = 0; t < m->ntables; t++)
			row_bytes += r->trows[t] * rec_of(r, r->tdims[t]);
	}
	r->rows_off = ESD_CKPT_HEADER_SIZE + (uint64_t)m->ntables * CKPT_TABLE_ENTRY;
	r->dense_off = r->rows_off + row_bytes;
	r->trailer_off = r->dense_off + m->dense_len * 4 * (1 + (uint64_t)r->sf);
	uint64_t want = r->trailer_off + ESD_CKPT_TRAILER_SIZE;
	if (size < want)
		return fail(err, -ENODATA, size,
		            "truncated: %" PRIu64 " bytes, the header's counts (%" PRIu64
		            " rows of dim %u, %" PRIu64 " dense floats) need %" PRIu64,
		            size, r->info.row_count, m->dim, m->dense_len, want);
	if (size > want)
		return fail(err, -EBADMSG, want,
		            "%" PRIu64 " trailing bytes after the trailer at %" PRIu64, size - want,
		            r->trailer_off);
	r->info.file_size = size;
	return 0;
}

static int check_header(struct esd_ckpt_reader *r, const unsigned char *h, uint64_t size,
                        struct esd_ckpt_error *err)
{
	struct esd_ckpt_meta *m = &r->info.meta;
	uint32_t v, opt, flags;
	if (memcmp(h + H_MAGIC, CKPT_MAGIC, 8))
		return fail(err, -ESD_EBADMAGIC, H_MAGIC, "not a checkpoint: bad header magic");
	v = esd_get_le32(h + H_VERSION);
	if (v != ESD_CKPT_VERSION && v != ESD_CKPT_VERSION_PADDED)
		return fail(err, -ESD_EBADVERSION, H_VERSION,
		            "checkpoint version %u, this code reads versions %u and %u", v,
		            ESD_CKPT_VERSION_PADDED, ESD_CKPT_VERSION);
	r->version = v;
	if (esd_get_le32(h + H_HSIZE) != ESD_CKPT_HEADER_SIZE)
		return fail(err, -EBADMSG, H_HSIZE, "header size %u, expected %u",
		            esd_get_le32(h + H_HSIZE), ESD_CKPT_HEADER_SIZE);
	if (esd_get_le64(h + H_SUM) != esd_ckpt_hash(h, H_SUM))
		return fail(err, -ESD_EBADSUM, 0, "header checksum mismatch over bytes [0, %u)",
		            (unsigned)H_SUM);
	m->seed = esd_get_le64(h + H_SEED);
	m->iteration = esd_get_le64(h + H_ITER);
	m->data_cursor = esd_get_le64(h + H_CURSOR);
	m->dense_len = esd_get_le64(h + H_DENSE);
	m->dense_clock = esd_get_le64(h + H_DCLOCK);
	m->dim = esd_get_le32(h + H_DIM);
	m->shard = esd_get_le32(h + H_SHARD);
	m->nshards = esd_get_le32(h + H_NSHARDS);
	r->info.row_count = esd_get_le64(h + H_ROWS);
	opt = esd_get_le32(h + H_OPT);
	flags = esd_get_le32(h + H_FLAGS);
	r->sf = esd_get_le32(h + H_SF);
	if (m->dim < 1 || m->dim > ESD_CKPT_MAX_DIM)
		return fail(err, -EBADMSG, H_DIM, "row dim %u out of range [1, %u]", m->dim,
		            ESD_CKPT_MAX_DIM);
	if (opt > ESD_OPT_ADAM)
		return fail(err, -EBADMSG, H_OPT, "unknown optimizer %u", opt);
	m->optimizer = (enum esd_optimizer)opt;
	if (r->sf != esd_optimizer_state_floats(m->optimizer))
		return fail(err, -EBADMSG, H_SF, "%u state floats per element, optimizer %u has %u",
		            r->sf, opt, esd_optimizer_state_floats(m->optimizer));
	if (m->nshards < 1 || m->shard >= m->nshards)
		return fail(err, -EBADMSG, H_SHARD, "shard %u of %u", m->shard, m->nshards);
	if (flags & ~(ESD_CKPT_FLAG_SORTED | ESD_CKPT_FLAG_INCR))
		return fail(err, -EBADMSG, H_FLAGS, "unknown flags 0x%x", flags);
	r->info.sorted = flags & ESD_CKPT_FLAG_SORTED;
	m->increment = flags & ESD_CKPT_FLAG_INCR;
	m->parent_iteration = esd_get_le64(h + H_PARENT_ITER);
	m->parent_sum = esd_get_le64(h + H_PARENT_SUM);
	if (!m->increment && (m->parent_iteration || m->parent_sum))
		return fail(err, -EBADMSG, H_PARENT_ITER, "a parent named, but not an increment");
	if (m->increment && m->parent_iteration >= m->iteration)
		return fail(err, -EBADMSG, H_PARENT_ITER,
		            "increment of iteration %" PRIu64 " on a parent of iteration %" PRIu64,
		            m->iteration, m->parent_iteration);
	r->file_rows = r->info.row_count;
	r->info.chain = 1;
	if (v == ESD_CKPT_VERSION_PADDED)
		for (unsigned i = H_RESERVED; i < H_SUM; i++)
			if (h[i])
				return fail(err, -EBADMSG, i, "reserved header byte is not zero");
	int rc = v == ESD_CKPT_VERSION_PADDED ? 0 : read_tables(r, h, err);
	if (rc)
		return rc;
	return check_size(r, size, err);
}

static int check_trailer(struct esd_ckpt_reader *r, const unsigned char *h, const unsigned char *t,
                         struct esd_ckpt_error *err)
{
	const uint64_t o = r->trailer_off;
	if (memcmp(t + T_MAGIC, CKPT_TRAILER_MAGIC, 8))
		return fail(err, -ESD_EBADMAGIC, o, "bad trailer magic at %" PRIu64, o);
	if (esd_get_le64(t + T_SUM) != esd_ckpt_hash(t, T_SUM))
		return fail(err, -ESD_EBADSUM, o,
		            "trailer checksum mismatch over bytes [%" PRIu64 ", %" PRIu64 ")", o,
		            o + T_SUM);
	if (esd_get_le64(t + T_ROWS) != r->info.row_count)
		return fail(err, -EBADMSG, o + T_ROWS,
		            "trailer says %" PRIu64 " rows, header %" PRIu64,
		            esd_get_le64(t + T_ROWS), r->info.row_count);
	if (esd_get_le64(t + T_DENSE) != r->info.meta.dense_len)
		return fail(err, -EBADMSG, o + T_DENSE,
		            "trailer says %" PRIu64 " dense floats, header %" PRIu64,
		            esd_get_le64(t + T_DENSE), r->info.meta.dense_len);
	if (esd_get_le64(t + T_HDRSUM) != esd_get_le64(h + H_SUM))
		return fail(err, -EBADMSG, o + T_HDRSUM,
		            "trailer belongs to another header (header checksum differs)");
	r->body_sum = esd_get_le64(t + T_BODYSUM);
	r->info.file_sum = esd_get_le64(t + T_SUM);
	return 0;
}

/* Bytes of the record of key: the file's dim, or (version 2) its table's;
 * 0 for a table the file has none of. */
static uint64_t rec_of_key(const struct esd_ckpt_reader *r, uint64_t key)
{
	const struct esd_ckpt_meta *m = &r->info.meta;
	if (!m->ntables)
		return r->rec;
	const uint32_t t = esd_key_table(key);
	return t < m->ntables ? rec_of(r, r->tdims[t]) : 0;
}

/* Hand the record at p to fn with value and state at the file's dim (a
 * version-2 row padded with zeros in r->pad). */
static int deliver(struct esd_ckpt_reader *r, const unsigned char *p, esd_ckpt_row_fn fn,
                   void *arg)
{
	const uint32_t dim = r->info.meta.dim;
	const uint64_t key = esd_get_le64(p), clock = esd_get_le64(p + 8);
	const float *v = (const float *)(const void *)(p + 16);
	const uint32_t d = r->info.meta.ntables ? r->tdims[esd_key_table(key)] : dim;
	if (d == dim)
		return fn(arg, key, clock, v, r->sf ? v + dim : NULL);
	memset(r->pad, 0, (size_t)dim * (1 + r->sf) * sizeof(float));
	for (uint32_t b = 0; b <= r->sf; b++)
		memcpy(r->pad + (size_t)b * dim, v + (size_t)b * d, d * sizeof(float));
	return fn(arg, key, clock, r->pad, r->sf ? r->pad + dim : NULL);
}

/* The rows' bytes from off into the buffer (after hashing what the buffer
 * held before off: every byte of it was walked). */
static int refill(struct esd_ckpt_reader *r, XXH64_state_t *st, uint64_t *boff, uint64_t *blen,
                  uint64_t off, struct esd_ckpt_error *err)
{
	XXH64_update(st, r->buf, (size_t)(off - *boff));
	uint64_t n = r->dense_off - off < r->bufsize ? r->dense_off - off : r->bufsize;
	int rc = pread_all(r->fd, r->buf, (size_t)n, off);
	if (rc)
		return fail(err, rc, off, "read of rows at %" PRIu64 " failed: %s", off,
		            esd_strerror(rc));
	*boff = off;
	*blen = n;
	return 0;
}

/* The record at off fits the rows' section and is of a table the file
 * has (version 2 counts its rows per table in seen). */
static int check_record(struct esd_ckpt_reader *r, uint64_t off, uint64_t key, uint64_t rec,
                        uint64_t *seen, struct esd_ckpt_error *err)
{
	if (!rec)
		return fail(err, -EBADMSG, off,
		            "row 0x%" PRIx64 " at %" PRIu64 " is of table %u, the file has %u", key,
		            off, esd_key_table(key), r->info.meta.ntables);
	if (off + rec > r->dense_off)
		return fail(err, -EBADMSG, off,
		            "row 0x%" PRIx64 " at %" PRIu64 " runs past the rows' end at %" PRIu64,
		            key, off, r->dense_off);
	if (seen && ++seen[esd_key_table(key)] > r->trows[esd_key_table(key)])
		return fail(err, -EBADMSG, off,
		            "more rows of table %u than the %" PRIu64 " its entry says",
		            esd_key_table(key), r->trows[esd_key_table(key)]);
	return 0;
}

/*
 * One pass over the body [rows_off, trailer_off): checksum, and key order
 * when the file says sorted. With fn, rows are delivered too.
 */
static int walk_rows(struct esd_ckpt_reader *r, XXH64_state_t *st, esd_ckpt_row_fn fn, void *arg,
                     struct esd_ckpt_error *err)
{
	uint64_t left = r->file_rows, off = r->rows_off, prev = 0, boff = off, blen = 0;
	uint64_t *seen = NULL;
	int rc = 0;
	if (r->info.meta.ntables && !(seen = calloc(r->info.meta.ntables, sizeof(*seen))))
		return fail(err, -ENOMEM, 0, "out of memory");
	for (; left && !rc; left--) {
		if (off + 16 > r->dense_off) {
			rc = fail(err, -EBADMSG, off, "rows end at %" PRIu64 " with %" PRIu64 " to go",
			          r->dense_off, left);
			break;
		}
		if (off + 16 > boff + blen && (rc = refill(r, st, &boff, &blen, off, err)))
			break;
		uint64_t key = esd_get_le64(r->buf + (off - boff)), rec = rec_of_key(r, key);
		if ((rc = check_record(r, off, key, rec, seen, err)))
			break;
		if (off + rec > boff + blen && (rc = refill(r, st, &boff, &blen, off, err)))
			break;
		if (r->info.sorted && off != r->rows_off && key <= prev) {
			rc = fail(err, -EBADMSG, off,
			          "rows marked sorted, but key 0x%" PRIx64 " at %" PRIu64
			          " follows 0x%" PRIx64,
			          key, off, prev);
			break;
		}
		prev = key;
		r->cur_off = off;
		if (fn)
			rc = deliver(r, r->buf + (off - boff), fn, arg);
		off += rec;
	}
	free(seen);
	if (!rc && off != r->dense_off)
		rc = fail(err, -EBADMSG, off, "rows end at %" PRIu64 ", their section at %" PRIu64,
		          off, r->dense_off);
	if (!rc)
		XXH64_update(st, r->buf, (size_t)(off - boff));
	return rc;
}

static int walk_body(struct esd_ckpt_reader *r, esd_ckpt_row_fn fn, void *arg,
                     struct esd_ckpt_error *err)
{
	XXH64_state_t *st = XXH64_createState();
	uint64_t off = r->dense_off;
	int rc = 0;
	if (!st)
		return fail(err, -ENOMEM, 0, "out of memory");
	XXH64_reset(st, 0);
	rc = walk_rows(r, st, fn, arg, err);
	if (rc)
		goto out;
	/* the dense section, hashed in buffer-sized pieces */
	while (off < r->trailer_off) {
		uint64_t n = r->trailer_off - off;
		if (n > r->bufsize)
			n = r->bufsize;
		rc = pread_all(r->fd, r->buf, (size_t)n, off);
		if (rc) {
			rc = fail(err, rc, off, "read of dense table at %" PRIu64 " failed: %s",
			          off, esd_strerror(rc));
			goto out;
		}
		XXH64_update(st, r->buf, (size_t)n);
		off += n;
	}
	if (XXH64_digest(st) != r->body_sum)
		rc = fail(err, -ESD_EBADSUM, r->rows_off,
		          "body checksum mismatch over bytes [%" PRIu64 ", %" PRIu64 ")",
		          r->rows_off, r->trailer_off);
out:
	XXH64_freeState(st);
	return rc;
}

static int open_one_fd(int fd, struct esd_ckpt_reader **out, struct esd_ckpt_error *err)
{
	struct esd_ckpt_reader *r;
	unsigned char h[ESD_CKPT_HEADER_SIZE], t[ESD_CKPT_TRAILER_SIZE];
	struct stat sb;
	int rc;

	if (err)
		memset(err, 0, sizeof(*err));
	if (fd < 0 || !out)
		return fail(err, -EINVAL, 0, "bad arguments");
	r = calloc(1, sizeof(*r));
	if (!r)
		return fail(err, -ENOMEM, 0, "out of memory");
	r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (r->fd < 0) {
		rc = fail(err, esd_neg_errno(), 0, "dup: %s", strerror(errno));
		goto err_free;
	}
	if (fstat(r->fd, &sb)) {
		rc = fail(err, esd_neg_errno(), 0, "fstat: %s", strerror(errno));
		goto err_close;
	}
	if (!S_ISREG(sb.st_mode)) {
		rc = fail(err, -EINVAL, 0, "not a regular file");
		goto err_close;
	}
	if ((uint64_t)sb.st_size < ESD_CKPT_HEADER_SIZE) {
		rc = fail(err, -ENODATA, (uint64_t)sb.st_size,
		          "truncated: %lld bytes, shorter than the %u-byte header",
		          (long long)sb.st_size, ESD_CKPT_HEADER_SIZE);
		goto err_close;
	}
	rc = pread_all(r->fd, h, sizeof(h), 0);
	if (rc) {
		rc = fail(err, rc, 0, "read of header failed: %s", esd_strerror(rc));
		goto err_close;
	}
	rc = check_header(r, h, (uint64_t)sb.st_size, err);
	if (rc)
		goto err_close;
	rc = pread_all(r->fd, t, sizeof(t), r->trailer_off);
	if (rc) {
		rc = fail(err, rc, r->trailer_off, "read of trailer failed: %s", esd_strerror(rc));
		goto err_close;
	}
	rc = check_trailer(r, h, t, err);
	if (rc)
		goto err_close;
	r->bufsize = (size_t)((RBUF_MIN + r->rec - 1) / r->rec * r->rec);
	r->buf = malloc(r->bufsize);
	if (r->info.meta.ntables)
		r->pad = malloc((size_t)r->rec);
	if (!r->buf || (r->info.meta.ntables && !r->pad)) {
		rc = fail(err, -ENOMEM, 0, "out of memory");
		goto err_close;
	}
	rc = walk_body(r, NULL, NULL, err);
	if (rc)
		goto err_buf;
	*out = r;
	return 0;

err_buf:
	free(r->buf);
	free(r->pad);
err_close:
	close(r->fd);
err_free:
	free(r->tdims);
	free(r->trows);
	free(r);
	return rc;
}

static void prefix_path(struct esd_ckpt_error *err, const char *path)
{
	/* prefix the path to what went wrong */
	char msg[2 * sizeof(err->msg) + 64];
	snprintf(msg, sizeof(msg), "%s: %s (at byte %" PRIu64 ")", path, err->msg, err->offset);
	size_t l = strlen(msg);
	if (l >= sizeof(err->msg))
		l = sizeof(err->msg) - 1;
	memcpy(err->msg, msg, l);
	err->msg[l] = '\0';
}

static int open_one(const char *path, struct esd_ckpt_reader **out, struct esd_ckpt_error *err);

/* ---- increments ---------------------------------------------------------- */

/* The header of the file at path and its file checksum (the trailer's,
 * which covers the header's and the body's), both checked: 0, or -errno. */
static int read_header(const char *path, unsigned char h[ESD_CKPT_HEADER_SIZE], uint64_t *sum)
{
	unsigned char t[ESD_CKPT_TRAILER_SIZE];
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return esd_neg_errno();
	int rc = fstat(fd, &sb) ? esd_neg_errno() : 0;
	if (!rc && (uint64_t)sb.st_size < ESD_CKPT_HEADER_SIZE + ESD_CKPT_TRAILER_SIZE)
		rc = -ENODATA;
	if (!rc)
		rc = pread_all(fd, h, ESD_CKPT_HEADER_SIZE, 0);
	if (!rc)
		rc = pread_all(fd, t, sizeof(t), (uint64_t)sb.st_size - sizeof(t));
	close(fd);
	if (rc)
		return rc;
	if (memcmp(h + H_MAGIC, CKPT_MAGIC, 8) || memcmp(t + T_MAGIC, CKPT_TRAILER_MAGIC, 8))
		return -ESD_EBADMAGIC;
	if (esd_get_le64(h + H_SUM) != esd_ckpt_hash(h, H_SUM) ||
	    esd_get_le64(t + T_SUM) != esd_ckpt_hash(t, T_SUM) ||
	    esd_get_le64(t + T_HDRSUM) != esd_get_le64(h + H_SUM))
		return -ESD_EBADSUM;
	*sum = esd_get_le64(t + T_SUM);
	return 0;
}

int esd_ckpt_file_sum(const char *path, uint64_t *sum)
{
	unsigned char h[ESD_CKPT_HEADER_SIZE];
	return read_header(path, h, sum);
}

int esd_ckpt_parent(const char *path, char *buf, size_t len, struct esd_ckpt_error *err)
{
	static const char *const kinds[] = {"inc", "base"};
	unsigned char h[ESD_CKPT_HEADER_SIZE], ph[ESD_CKPT_HEADER_SIZE];
	if (err)
		memset(err, 0, sizeof(*err));
	uint64_t own;
	int rc = read_header(path, h, &own);
	if (rc)
		return fail(err, rc, 0, "%s: header or trailer: %s", path, esd_strerror(rc));
	if (!(esd_get_le32(h + H_FLAGS) & ESD_CKPT_FLAG_INCR))
		return 0;
	const char *slash = strrchr(path, '/');
	int dl = slash ? (int)(slash - path) : 1;
	const char *dir = slash ? path : ".";
	uint64_t it = esd_get_le64(h + H_PARENT_ITER), sum = esd_get_le64(h + H_PARENT_SUM);
	for (unsigned k = 0; k < 2; k++) {
		int n = snprintf(buf, len, "%.*s/ps-shard%u.ckpt.%s%" PRIu64, dl, dir,
		                 esd_get_le32(h + H_SHARD), kinds[k], it);
		if (n < 0 || (size_t)n >= len)
			return fail(err, -ENAMETOOLONG, 0, "%s: parent path too long", path);
		uint64_t psum;
		if (!read_header(buf, ph, &psum) && psum == sum)
			return 1;
	}
	return fail(err, -ENOENT, H_PARENT_ITER,
	            "%s: an increment whose parent (iteration %" PRIu64 ", file checksum %016" PRIx64
	            ") is missing: ps-shard%u.ckpt.{inc,base}%" PRIu64 " next to it",
	            path, it, sum, esd_get_le32(h + H_SHARD), it);
}

struct key_ent {
	uint64_t key;
	uint64_t off;   /* of the newest version's record in level `level` */
	uint32_t level; /* newest file holding the key: 0 the base, 1.. the increments */
	uint32_t first; /* oldest increment holding it */
	bool used, in_base;
};

struct key_map {
	struct key_ent *e;
	size_t cap, n; /* cap a power of two */
};

static size_t key_slot(const struct key_map *m, uint64_t key)
{
	uint64_t x = key * 0x9e3779b97f4a7c15ull;
	size_t i = (size_t)(x ^ x >> 29) & (m->cap - 1);
	while (m->e[i].used && m->e[i].key != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static struct key_ent *key_find(const struct key_map *m, uint64_t key)
{
	struct key_ent *e = &m->e[key_slot(m, key)];
	return e->used ? e : NULL;
}

static struct key_ent *key_add(struct key_map *m, uint64_t key)
{
	if (2 * (m->n + 1) > m->cap) {
		struct key_map g = {.cap = m->cap ? 2 * m->cap : 1024};
		g.e = calloc(g.cap, sizeof(*g.e));
		if (!g.e)
			return NULL;
		for (size_t i = 0; i < m->cap; i++)
			if (m->e[i].used)
				g.e[key_slot(&g, m->e[i].key)] = m->e[i];
		g.n = m->n;
		free(m->e);
		*m = g;
	}
	struct key_ent *e = &m->e[key_slot(m, key)];
	if (!e->used) {
		*e = (struct key_ent){.key = key, .used = true};
		m->n++;
	}
	return e;
}

/* Level i of r's chain: 0 the base, nchain r itself. */
static struct esd_ckpt_reader *level_of(struct esd_ckpt_reader *r, uint32_t i)
{
	return i == r->nchain ? r : r->chain[r->nchain - 1 - i];
}

struct walk_ctx {
	struct esd_ckpt_reader *top, *at;
	uint32_t level;
	uint64_t idx; /* rows of `at` walked so far */
	uint64_t in_base;
	esd_ckpt_row_fn fn;
	void *arg;
	unsigned char *rec; /* one record */
};

static int collect_key(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	struct walk_ctx *c = arg;
	(void)clock, (void)v, (void)s;
	struct key_ent *e = key_add(c->top->map, key);
	if (!e)
		return -ENOMEM;
	if (!e->level) { /* levels are walked newest first */
		e->level = c->level;
		e->off = c->at->cur_off;
	}
	e->first = c->level;
	c->idx++;
	return 0;
}

static int mark_base(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	struct walk_ctx *c = arg;
	(void)clock, (void)v, (void)s;
	struct key_ent *e = key_find(c->top->map, key);
	if (e && !e->in_base) {
		e->in_base = true;
		c->in_base++;
	}
	return 0;
}

/* Whether two files have the same table dims (none, or each equal). */
static bool same_tables(const struct esd_ckpt_meta *a, const struct esd_ckpt_meta *b)
{
	return a->ntables == b->ntables &&
	       (!a->ntables ||
	        !memcmp(a->table_dims, b->table_dims, a->ntables * sizeof(*a->table_dims)));
}

/* Open and check r's parents back to the base and index the keys of its
 * increments. */
static int open_chain(const char *path, struct esd_ckpt_reader *r, struct esd_ckpt_error *err)
{
	char cur[4096], par[4096];
	struct esd_ckpt_reader *at = r;
	int rc;
	snprintf(cur, sizeof(cur), "%s", path);
	while (at->info.meta.increment) {
		if (r->nchain + 1 >= ESD_CKPT_MAX_CHAIN)
			return fail(err, -ELOOP, 0, "%s: more than %u increments", path,
			            ESD_CKPT_MAX_CHAIN - 1);
		rc = esd_ckpt_parent(cur, par, sizeof(par), err);
		if (rc < 0)
			return rc;
		struct esd_ckpt_reader *p;
		rc = open_one(par, &p, err);
		if (rc)
			return rc;
		r->chain[r->nchain++] = p;
		const struct esd_ckpt_meta *a = &at->info.meta, *b = &p->info.meta;
		if (b->iteration != a->parent_iteration || b->seed != a->seed || b->dim != a->dim ||
		    b->optimizer != a->optimizer || b->shard != a->shard || b->nshards != a->nshards ||
		    !same_tables(a, b))
			return fail(err, -EBADMSG, 0,
			            "%s: parent of %s is of another shard or iteration", par, cur);
		r->info.file_size += p->info.file_size;
		at = p;
		snprintf(cur, sizeof(cur), "%s", par);
	}
	r->map = calloc(1, sizeof(*r->map));
	if (!r->map)
		return fail(err, -ENOMEM, 0, "out of memory");
	struct walk_ctx c = {.top = r};
	for (uint32_t i = r->nchain; i >= 1; i--) {
		c.at = level_of(r, i);
		c.level = i;
		c.idx = 0;
		rc = walk_body(c.at, collect_key, &c, err);
		if (rc)
			return rc;
	}
	c.at = level_of(r, 0);
	rc = walk_body(c.at, mark_base, &c, err);
	if (rc)
		return rc;
	r->info.row_count = c.at->file_rows + (r->map->n - c.in_base);
	r->info.sorted = false;
	r->info.chain = r->nchain + 1;
	return 0;
}

/* Deliver the newest version of e (held in level e->level). */
static int emit_newest(struct walk_ctx *c, const struct key_ent *e)
{
	struct esd_ckpt_reader *l = level_of(c->top, e->level);
	int rc = pread_all(l->fd, c->rec, (size_t)rec_of_key(l, e->key), e->off);
	return rc ? rc : deliver(l, c->rec, c->fn, c->arg);
}

static int merge_base_row(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	struct walk_ctx *c = arg;
	const struct key_ent *e = key_find(c->top->map, key);
	return e ? emit_newest(c, e) : c->fn(c->arg, key, clock, v, s);
}

static int merge_new_row(void *arg, esd_key_t key, uint64_t clock, const float *v, const float *s)
{
	struct walk_ctx *c = arg;
	const struct key_ent *e = key_find(c->top->map, key);
	if (!e || e->in_base || e->first != c->level)
		return 0;
	return e->level == c->level ? c->fn(c->arg, key, clock, v, s) : emit_newest(c, e);
}

/* The rows of a chain: the base's in its order, each at its newest value,
 * then the rows created later, in the order of the increment that first
 * holds them. */
static int merged_rows(struct esd_ckpt_reader *r, esd_ckpt_row_fn fn, void *arg)
{
	struct walk_ctx c = {.top = r, .fn = fn, .arg = arg};
	c.rec = malloc((size_t)r->rec);
	if (!c.rec)
		return -ENOMEM;
	c.at = level_of(r, 0);
	int rc = walk_body(c.at, merge_base_row, &c, NULL);
	for (uint32_t i = 1; i <= r->nchain && !rc; i++) {
		c.at = level_of(r, i);
		c.level = i;
		rc = walk_body(c.at, merge_new_row, &c, NULL);
	}
	free(c.rec);
	return rc;
}

/* One file, without its parents; errors prefixed with path. */
static int open_one(const char *path, struct esd_ckpt_reader **out, struct esd_ckpt_error *err)
{
	int fd, rc;
	if (err)
		memset(err, 0, sizeof(*err));
	if (!path || !out)
		return fail(err, -EINVAL, 0, "bad arguments");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = esd_neg_errno();
		return fail(err, rc, 0, "%s: %s", path, esd_strerror(rc));
	}
	rc = open_one_fd(fd, out, err);
	close(fd);
	if (rc && err)
		prefix_path(err, path);
	return rc;
}

int esd_ckpt_open_fd(int fd, struct esd_ckpt_reader **out, struct esd_ckpt_error *err)
{
	int rc = open_one_fd(fd, out, err);
	if (!rc && (*out)->info.meta.increment) {
		esd_ckpt_close(*out);
		*out = NULL;
		return fail(err, -EINVAL, H_FLAGS,
		            "an increment: open it by path so that its parent can be found");
	}
	return rc;
}

int esd_ckpt_open(const char *path, struct esd_ckpt_reader **out, struct esd_ckpt_error *err)
{
	int rc = open_one(path, out, err);
	if (rc || !(*out)->info.meta.increment)
		return rc;
	rc = open_chain(path, *out, err);
	if (rc) {
		esd_ckpt_close(*out);
		*out = NULL;
	}
	return rc;
}

const struct esd_ckpt_info *esd_ckpt_info(const struct esd_ckpt_reader *r)
{
	return &r->info;
}

int esd_ckpt_read_rows(struct esd_ckpt_reader *r, esd_ckpt_row_fn fn, void *arg)
{
	if (!r || !fn)
		return -EINVAL;
	return r->nchain ? merged_rows(r, fn, arg) : walk_body(r, fn, arg, NULL);
}

int esd_ckpt_read_dense(struct esd_ckpt_reader *r, float *dense, float *state)
{
	const uint64_t n = r ? r->info.meta.dense_len : 0;
	int rc;
	if (!r || (n && !dense))
		return -EINVAL;
	if (!n)
		return 0;
	rc = pread_all(r->fd, dense, (size_t)(n * sizeof(float)), r->dense_off);
	if (!rc && state && r->sf)
		rc = pread_all(r->fd, state, (size_t)(n * r->sf * sizeof(float)),
		               r->dense_off + n * sizeof(float));
	return rc;
}

void esd_ckpt_close(struct esd_ckpt_reader *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; i < r->nchain; i++)
		esd_ckpt_close(r->chain[i]);
	if (r->map)
		free(r->map->e);
	free(r->map);
	close(r->fd);
	free(r->buf);
	free(r->pad);
	free(r->tdims);
	free(r->trows);
	free(r);
}
