/*
 * writer.c - the dataset stream writer: buffers one block of samples in
 * columnar form, checksums (and optionally zstd-compresses) it, appends it,
 * and on close writes the block index and completes the header in place.
 *
 * The header goes out first with index_offset 0, so a file whose writer
 * died is recognisably incomplete; close rewrites it with the counts.
 */
#include "format.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>
#ifdef ESD_DATA_HAVE_ZSTD
#include <zstd.h>
#endif

#include <esd/err.h>

struct esd_ds_writer {
	struct esd_ds_info info;
	char *path;
	int fd;
	uint32_t bs;    /* samples per block */
	uint32_t n;     /* samples in the current block */
	uint64_t count; /* samples appended */
	uint64_t off;   /* file offset of the next block */
	size_t hdr_bytes;
	uint8_t *labels;                 /* [bs] */
	uint8_t *dense;                  /* [bs * ndense * width] */
	uint8_t *ids[ESD_DS_MAX_TABLES]; /* per table [bs * width]; a bag table's grows */
	size_t ids_len[ESD_DS_MAX_TABLES], ids_cap[ESD_DS_MAX_TABLES]; /* bytes */
	uint8_t *lens[ESD_DS_MAX_TABLES]; /* bag tables: [bs * len width] */
	uint8_t *wts[ESD_DS_MAX_TABLES];  /* weighted: f32 per ID, as ids[t] grows */
	size_t wts_cap[ESD_DS_MAX_TABLES]; /* bytes; wts' length is ids_len / idw * 4 */
	unsigned idw[ESD_DS_MAX_TABLES], lw[ESD_DS_MAX_TABLES];
	uint32_t longest[ESD_DS_MAX_TABLES]; /* bag tables: the longest bag appended */
	uint8_t *raw;  /* assembled payload */
	uint8_t *zbuf; /* compressed payload */
	size_t raw_cap, zcap;
	uint64_t *index; /* block offsets */
	size_t nindex, index_cap;
	int err; /* sticky write error */
};

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t w = pwrite(fd, p, len, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return esd_neg_errno();
		}
		p += w;
		len -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

static void encode_header(const struct esd_ds_writer *w, uint8_t *h, uint64_t index_off)
{
	const struct esd_ds_info *in = &w->info;
	memset(h, 0, w->hdr_bytes);
	memcpy(h + HDR_MAGIC, DS_MAGIC, 8);
	esd_put_le32(h + HDR_VERSION, has_bags(in) ? DS_VERSION_BAGS : DS_VERSION);
	esd_put_le32(h + HDR_BYTES, (uint32_t)w->hdr_bytes);
	memcpy(h + HDR_SHAPE, in->shape, strnlen(in->shape, ESD_DS_NAME_LEN - 1));
	esd_put_le32(h + HDR_NTABLES, in->ntables);
	esd_put_le32(h + HDR_NDENSE, in->ndense);
	esd_put_le32(h + HDR_DENSE_FORMAT, in->dense_format);
	esd_put_le32(h + HDR_BLOCK_SAMPLES, w->bs);
	esd_put_le32(h + HDR_FLAGS, (in->zstd_level > 0 ? DS_FLAG_ZSTD : 0) |
	                                (esd_ds_has_names(in) ? DS_FLAG_NAMES : 0) |
	                                (in->weighted ? DS_FLAG_WEIGHTS : 0));
	esd_put_le32(h + HDR_ORIGIN, in->origin);
	esd_put_le64(h + HDR_NSAMPLES, w->count);
	esd_put_le64(h + HDR_NBLOCKS, w->nindex);
	esd_put_le64(h + HDR_INDEX_OFFSET, index_off);
	esd_put_le64(h + HDR_SEED, in->seed);
	esd_put_lef64(h + HDR_DRIFT, in->drift);
	esd_put_lef64(h + HDR_SCALE, in->scale);
	esd_put_le64(h + HDR_MAX_ROWS, in->max_rows);
	esd_put_le64(h + HDR_SKIPPED, in->skipped);
	esd_put_le32(h + HDR_ZSTD_LEVEL, (uint32_t)in->zstd_level);
	memcpy(h + HDR_SOURCE, in->source, strnlen(in->source, ESD_DS_SOURCE_LEN - 1));
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint8_t *e = h + HDR_FIXED + (size_t)t * TABLE_ENTRY;
		esd_put_le64(e, in->rows[t]);
		esd_put_lef64(e + 8, in->zipf[t]);
		if (has_bags(in))
			esd_put_le32(h + HDR_FIXED + (size_t)in->ntables * TABLE_ENTRY + 4 * t,
			        in->max_bag[t]);
		if (esd_ds_has_names(in))
			memcpy(h + names_offset(in->ntables, has_bags(in)) + (size_t)t * ESD_DS_NAME_LEN,
			       in->names[t], strnlen(in->names[t], ESD_DS_NAME_LEN - 1));
	}
	size_t body = w->hdr_bytes - 8;
	esd_put_le64(h + body, XXH64(h, body, 0));
}

static int write_header(struct esd_ds_writer *w, uint64_t index_off)
{
	uint8_t *h = malloc(w->hdr_bytes);
	if (!h)
		return -ENOMEM;
	encode_header(w, h, index_off);
	int rc = write_all(w->fd, h, w->hdr_bytes, 0);
	free(h);
	return rc;
}

static void free_buffers(struct esd_ds_writer *w)
{
	free(w->labels);
	free(w->dense);
	for (uint32_t t = 0; t < ESD_DS_MAX_TABLES; t++) {
		free(w->ids[t]);
		free(w->lens[t]);
		free(w->wts[t]);
	}
	free(w->raw);
	free(w->zbuf);
	free(w->index);
	free(w->path);
}

int esd_ds_writer_open(const char *path, const struct esd_ds_info *info, struct esd_ds_writer **out)
{
	char why[160];
	int rc = esd_ds_info_check(info, why, sizeof(why));
	if (rc)
		return esd_ds_fail(rc, "%s: bad stream description: %s", path, why);
#ifndef ESD_DATA_HAVE_ZSTD
	if (info->zstd_level > 0)
		return esd_ds_fail(-ENOTSUP, "%s: zstd compression asked, built without zstd",
		                   path);
#endif
	struct esd_ds_writer *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = -1;
	w->info = *info;
	w->info.nsamples = 0;
	w->bs = info->block_samples ? info->block_samples : ESD_DS_BLOCK_SAMPLES;
	w->info.block_samples = w->bs;
	w->hdr_bytes = (size_t)header_bytes(info->ntables, has_bags(info), esd_ds_has_names(info));
	w->path = strdup(path);
	w->labels = malloc(w->bs);
	w->dense = malloc((size_t)w->bs * info->ndense * dense_width(info->dense_format) + 1);
	w->raw_cap = (size_t)w->bs * (1 + (size_t)info->ndense * 4 + 8u * info->ntables);
	w->raw = malloc(w->raw_cap); /* grown at a flush when bags need more */
	if (!w->path || !w->labels || !w->dense || !w->raw)
		goto fail_alloc;
	for (uint32_t t = 0; t < info->ntables; t++) {
		w->idw[t] = id_width(info->rows[t]);
		w->ids_cap[t] = (size_t)w->bs * w->idw[t];
		w->ids[t] = malloc(w->ids_cap[t]);
		if (!w->ids[t])
			goto fail_alloc;
		if (is_bag(info, t)) {
			w->lw[t] = len_width(info->max_bag[t]);
			w->lens[t] = malloc((size_t)w->bs * w->lw[t]);
			if (!w->lens[t])
				goto fail_alloc;
		}
	}
	w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		rc = esd_neg_errno();
		esd_ds_fail(rc, "%s: cannot create: %s", path, esd_strerror(rc));
		goto fail_buffers;
	}
	rc = write_header(w, 0);
	if (rc) {
		esd_ds_fail(rc, "%s: writing the header: %s", path, esd_strerror(rc));
		goto fail_open;
	}
	w->off = w->hdr_bytes;
	*out = w;
	return 0;

fail_open:
	close(w->fd);
	unlink(path);
	goto fail_buffers;
fail_alloc:
	rc = -ENOMEM;
fail_buffers:
	free_buffers(w);
	free(w);
	return rc;
}

static int grow_buf(uint8_t **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	uint8_t *q = realloc(*p, need);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = need;
	return 0;
}

/* The raw payload of the current block (and its compressed bound). */
static int size_buffers(struct esd_ds_writer *w)
{
	const struct esd_ds_info *in = &w->info;
	size_t need = (size_t)w->n * (1 + (size_t)in->ndense * dense_width(in->dense_format));
	for (uint32_t t = 0; t < in->ntables; t++)
		need += w->ids_len[t] + (w->lens[t] ? (size_t)w->n * w->lw[t] : 0) +
		        w->ids_len[t] / w->idw[t] * wt_width(in);
	int rc = grow_buf(&w->raw, &w->raw_cap, need ? need : 1);
#ifdef ESD_DATA_HAVE_ZSTD
	if (!rc && in->zstd_level > 0)
		rc = grow_buf(&w->zbuf, &w->zcap, ZSTD_compressBound(w->raw_cap));
#endif
	return rc;
}

/* Long: the block assembled column by column, checksummed, maybe compressed, written and
 * indexed, in that order. */
static int flush_block(struct esd_ds_writer *w)
{
	const struct esd_ds_info *in = &w->info;
	uint32_t n = w->n;
	int rc = size_buffers(w);
	if (rc)
		return rc;
	uint8_t *p = w->raw;
	memcpy(p, w->labels, n);
	p += n;
	size_t db = (size_t)n * in->ndense * dense_width(in->dense_format);
	memcpy(p, w->dense, db);
	p += db;
	for (uint32_t t = 0; t < in->ntables; t++) {
		if (w->lens[t]) {
			memcpy(p, w->lens[t], (size_t)n * w->lw[t]);
			p += (size_t)n * w->lw[t];
		}
		memcpy(p, w->ids[t], w->ids_len[t]);
		p += w->ids_len[t];
		if (in->weighted) {
			size_t wb = w->ids_len[t] / w->idw[t] * 4;
			memcpy(p, w->wts[t], wb);
			p += wb;
		}
		w->ids_len[t] = 0;
	}
	size_t raw = (size_t)(p - w->raw);
	const uint8_t *payload = w->raw;
	size_t stored = raw;
	uint32_t flags = 0;
#ifdef ESD_DATA_HAVE_ZSTD
	if (in->zstd_level > 0) {
		size_t z = ZSTD_compress(w->zbuf, w->zcap, w->raw, raw, in->zstd_level);
		if (ZSTD_isError(z))
			return esd_ds_fail(-EIO, "%s: zstd: %s", w->path, ZSTD_getErrorName(z));
		if (z < raw) { /* else keep the block raw */
			payload = w->zbuf;
			stored = z;
			flags = DS_FLAG_ZSTD;
		}
	}
#endif
	uint8_t bh[BLOCK_HDR];
	memset(bh, 0, sizeof(bh));
	esd_put_le32(bh + BLK_MAGIC, DS_BLOCK_MAGIC);
	esd_put_le32(bh + BLK_N, n);
	esd_put_le64(bh + BLK_FIRST, w->count - n);
	esd_put_le32(bh + BLK_STORED, (uint32_t)stored);
	esd_put_le32(bh + BLK_RAW, (uint32_t)raw);
	esd_put_le32(bh + BLK_FLAGS, flags);
	XXH64_state_t st;
	XXH64_reset(&st, 0);
	XXH64_update(&st, bh, BLK_SUM);
	XXH64_update(&st, payload, stored);
	esd_put_le64(bh + BLK_SUM, XXH64_digest(&st));

	if (w->nindex == w->index_cap) {
		size_t cap = w->index_cap ? w->index_cap * 2 : 64;
		uint64_t *ni = realloc(w->index, cap * sizeof(*ni));
		if (!ni)
			return -ENOMEM;
		w->index = ni;
		w->index_cap = cap;
	}
	rc = write_all(w->fd, bh, sizeof(bh), w->off);
	if (!rc)
		rc = write_all(w->fd, payload, stored, w->off + sizeof(bh));
	if (rc)
		return esd_ds_fail(rc, "%s: writing block %zu at byte %llu: %s", w->path, w->nindex,
		                   (unsigned long long)w->off, esd_strerror(rc));
	w->index[w->nindex++] = w->off;
	w->off += sizeof(bh) + stored;
	w->n = 0;
	return 0;
}

/* A sample's weights: finite, and all 1 in a stream without weights. */
static int check_weights(const struct esd_ds_writer *w, const uint32_t *lens, const float *wt)
{
	const struct esd_ds_info *in = &w->info;
	size_t k = 0;
	for (uint32_t t = 0; wt && t < in->ntables; t++)
		for (uint32_t j = 0; j < lens[t]; j++, k++) {
			if (!isfinite(wt[k]))
				return esd_ds_fail(-ERANGE,
				                   "%s: sample %llu: table %u: weight %g of ID %u "
				                   "is not finite",
				                   w->path, (unsigned long long)w->count, t,
				                   (double)wt[k], j);
			if (!in->weighted && wt[k] != 1.0f)
				return esd_ds_fail(-EINVAL,
				                   "%s: sample %llu: table %u: weight %g in a "
				                   "stream without weights",
				                   w->path, (unsigned long long)w->count, t,
				                   (double)wt[k]);
		}
	return 0;
}

/* A sample's lengths and IDs against the stream's description. */
static int check_sample(const struct esd_ds_writer *w, uint8_t label, const uint32_t *lens,
                        const uint64_t *ids)
{
	const struct esd_ds_info *in = &w->info;
	unsigned long long at = (unsigned long long)w->count;
	if (label > 1)
		return esd_ds_fail(-ERANGE, "%s: sample %llu: label %u is not 0 or 1", w->path, at,
		                   label);
	size_t k = 0;
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint32_t most = is_bag(in, t) ? in->max_bag[t] : 1;
		if (lens[t] > most || (!is_bag(in, t) && lens[t] != 1))
			return esd_ds_fail(-ERANGE,
			                   "%s: sample %llu: table %u: %u IDs, the table takes "
			                   "%s%u",
			                   w->path, at, t, lens[t], is_bag(in, t) ? "0.." : "",
			                   most);
		for (uint32_t j = 0; j < lens[t]; j++, k++)
			if (ids[k] >= in->rows[t])
				return esd_ds_fail(-ERANGE,
				                   "%s: sample %llu: table %u id %llu >= %llu rows",
				                   w->path, at, t, (unsigned long long)ids[k],
				                   (unsigned long long)in->rows[t]);
	}
	return 0;
}

static void put_id(uint8_t *p, unsigned width, uint64_t id)
{
	if (width == 4) {
		uint32_t v = (uint32_t)id;
		memcpy(p, &v, 4);
	} else {
		memcpy(p, &id, 8);
	}
}

/* Room for one more sample's IDs (and weights) in the table columns. */
static int grow_columns(struct esd_ds_writer *w, const uint32_t *lens)
{
	const struct esd_ds_info *in = &w->info;
	int rc = 0;
	for (uint32_t t = 0; t < in->ntables && !rc; t++) {
		size_t need = w->ids_len[t] + (size_t)lens[t] * w->idw[t];
		rc = grow_buf(&w->ids[t], &w->ids_cap[t], need);
		if (!rc && in->weighted)
			rc = grow_buf(&w->wts[t], &w->wts_cap[t], need / w->idw[t] * 4 + 4);
	}
	return rc;
}

int esd_ds_writer_append_weighted(struct esd_ds_writer *w, uint8_t label, const float *dense,
                                  const uint32_t *lens, const uint64_t *ids,
                                  const float *weights)
{
	const struct esd_ds_info *in = &w->info;
	if (w->err)
		return w->err;
	int rc = check_sample(w, label, lens, ids);
	if (!rc)
		rc = check_weights(w, lens, weights);
	if (!rc)
		rc = grow_columns(w, lens);
	if (rc)
		return rc;
	uint32_t i = w->n;
	w->labels[i] = label;
	if (in->dense_format == ESD_DS_DENSE_BF16) {
		uint8_t *d = w->dense + (size_t)i * in->ndense * 2;
		for (uint32_t j = 0; j < in->ndense; j++) {
			uint16_t h = f32_to_bf16(dense[j]);
			memcpy(d + 2 * j, &h, 2);
		}
	} else if (in->ndense) {
		memcpy(w->dense + (size_t)i * in->ndense * 4, dense, (size_t)in->ndense * 4);
	}
	for (uint32_t t = 0; t < in->ntables; t++) {
		if (w->lens[t]) {
			if (lens[t] > w->longest[t])
				w->longest[t] = lens[t];
			if (w->lw[t] == 1) {
				w->lens[t][i] = (uint8_t)lens[t];
			} else {
				uint16_t v = (uint16_t)lens[t];
				memcpy(w->lens[t] + (size_t)i * 2, &v, 2);
			}
		}
		for (uint32_t j = 0; j < lens[t]; j++) {
			if (in->weighted) {
				float v = weights ? *weights++ : 1.0f;
				memcpy(w->wts[t] + w->ids_len[t] / w->idw[t] * 4, &v, 4);
			}
			put_id(w->ids[t] + w->ids_len[t], w->idw[t], *ids++);
			w->ids_len[t] += w->idw[t];
		}
	}
	w->n++;
	w->count++;
	if (w->n == w->bs) {
		rc = flush_block(w);
		if (rc) {
			w->err = rc;
			return rc;
		}
	}
	return 0;
}

int esd_ds_writer_append_bags(struct esd_ds_writer *w, uint8_t label, const float *dense,
                              const uint32_t *lens, const uint64_t *ids)
{
	return esd_ds_writer_append_weighted(w, label, dense, lens, ids, NULL);
}

int esd_ds_writer_append(struct esd_ds_writer *w, uint8_t label, const float *dense,
                         const uint64_t *ids)
{
	static const uint32_t ones[ESD_DS_MAX_TABLES] = {[0 ... ESD_DS_MAX_TABLES - 1] = 1};
	return esd_ds_writer_append_bags(w, label, dense, ones, ids);
}

uint64_t esd_ds_writer_count(const struct esd_ds_writer *w)
{
	return w->count;
}

void esd_ds_writer_set_skipped(struct esd_ds_writer *w, uint64_t skipped)
{
	w->info.skipped = skipped;
}

/* The header's bound of each bag table comes down to its longest bag (at
 * least 2, and only where the lengths keep their width: the blocks are
 * written), so that readers size what they hold by the bags the file has. */
static void tighten_bags(struct esd_ds_writer *w)
{
	struct esd_ds_info *in = &w->info;
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint32_t m = w->longest[t] > 2 ? w->longest[t] : 2;
		if (is_bag(in, t) && m < in->max_bag[t] && len_width(m) == len_width(in->max_bag[t]))
			in->max_bag[t] = m;
	}
}

static int finish(struct esd_ds_writer *w)
{
	int rc = w->err;
	if (!rc && w->n)
		rc = flush_block(w);
	if (rc)
		return rc;
	tighten_bags(w);
	size_t ib = INDEX_HDR + w->nindex * 8 + 8;
	uint8_t *ix = malloc(ib);
	if (!ix)
		return -ENOMEM;
	esd_put_le32(ix, DS_INDEX_MAGIC);
	esd_put_le32(ix + 4, 0);
	esd_put_le64(ix + 8, w->nindex);
	for (size_t b = 0; b < w->nindex; b++)
		esd_put_le64(ix + INDEX_HDR + b * 8, w->index[b]);
	esd_put_le64(ix + ib - 8, XXH64(ix, ib - 8, 0));
	rc = write_all(w->fd, ix, ib, w->off);
	free(ix);
	if (!rc)
		rc = write_header(w, w->off);
	if (rc)
		return esd_ds_fail(rc, "%s: writing the index: %s", w->path, esd_strerror(rc));
	return 0;
}

int esd_ds_writer_close(struct esd_ds_writer *w)
{
	if (!w)
		return 0;
	int rc = finish(w);
	if (close(w->fd) && !rc)
		rc = esd_neg_errno();
	free_buffers(w);
	free(w);
	return rc;
}

void esd_ds_writer_discard(struct esd_ds_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	unlink(w->path);
	free_buffers(w);
	free(w);
}
