/*
 * reader.c - the streaming dataset reader. Open checks the header and the
 * block index (so a truncated or half-written file is refused up front);
 * each block is checked (xxh64) and decoded when the cursor first enters
 * it, and only that block is held in memory.
 */
#include "format.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>
#ifdef ESD_DATA_HAVE_ZSTD
#include <zstd.h>
#endif

#include <esd/err.h>

struct esd_ds_reader {
	struct esd_ds_info info;
	char *path;
	int fd;
	uint64_t file_size;
	uint64_t index_off;
	uint64_t nblocks;
	uint64_t *index; /* block offsets, nblocks + 1 (last = index offset) */
	uint64_t cursor;
	uint32_t bs;
	uint64_t sbytes; /* raw bytes per sample (with bags: at most) */
	uint64_t hdr_bytes;
	int bags;        /* some table has bags: version 2 */
	/* the decoded block */
	int64_t cur; /* block number, -1 none */
	uint32_t cur_n;
	uint8_t *buf; /* block as read (header + stored payload) */
	size_t buf_cap;
	uint8_t *zraw; /* decompressed payload */
	size_t zraw_cap;
	const uint8_t *labels;
	const uint8_t *dense;
	const uint8_t *ids[ESD_DS_MAX_TABLES];
	const uint8_t *wts[ESD_DS_MAX_TABLES]; /* weighted: an f32 per ID of ids[t] */
	unsigned idw[ESD_DS_MAX_TABLES];
	/* bag tables: start of each sample's bag in ids[t], cur_n + 1 entries */
	uint32_t *boff[ESD_DS_MAX_TABLES];
	size_t boff_cap[ESD_DS_MAX_TABLES];
};

static int read_at(struct esd_ds_reader *r, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t g = pread(r->fd, p, len, (off_t)off);
		if (g < 0) {
			if (errno == EINTR)
				continue;
			int rc = esd_neg_errno();
			return esd_ds_fail(rc, "%s: read at byte %llu: %s", r->path,
			                   (unsigned long long)off, esd_strerror(rc));
		}
		if (g == 0)
			return esd_ds_fail(-EPROTO, "%s: truncated at byte %llu", r->path,
			                   (unsigned long long)off);
		p += g;
		len -= (size_t)g;
		off += (uint64_t)g;
	}
	return 0;
}

/* Long: the header's fields read and checked in file order, each with its own error naming
 * the field. */
static int parse_header(struct esd_ds_reader *r)
{
	uint8_t fixed[HDR_FIXED];
	const char *path = r->path;
	if (r->file_size < HDR_FIXED) {
		if (r->file_size >= 8 && read_at(r, fixed, 8, 0) == 0 && memcmp(fixed, DS_MAGIC, 8))
			return esd_ds_fail(-ESD_EBADMAGIC,
			                   "%s: not a dataset stream (bad magic at "
			                   "byte 0)",
			                   path);
		return esd_ds_fail(-EPROTO, "%s: truncated: %llu bytes, the header alone needs %u",
		                   path, (unsigned long long)r->file_size, HDR_FIXED);
	}
	int rc = read_at(r, fixed, HDR_FIXED, 0);
	if (rc)
		return rc;
	if (memcmp(fixed + HDR_MAGIC, DS_MAGIC, 8))
		return esd_ds_fail(-ESD_EBADMAGIC, "%s: not a dataset stream (bad magic at byte 0)",
		                   path);
	uint32_t ver = esd_get_le32(fixed + HDR_VERSION);
	if (ver != DS_VERSION && ver != DS_VERSION_BAGS)
		return esd_ds_fail(-ESD_EBADVERSION,
		                   "%s: stream version %u at byte %u, this build "
		                   "reads versions %u and %u",
		                   path, ver, HDR_VERSION, DS_VERSION, DS_VERSION_BAGS);
	uint32_t nt = esd_get_le32(fixed + HDR_NTABLES);
	uint32_t hb = esd_get_le32(fixed + HDR_BYTES);
	r->bags = ver == DS_VERSION_BAGS;
	int named = (esd_get_le32(fixed + HDR_FLAGS) & DS_FLAG_NAMES) != 0;
	r->info.weighted = (esd_get_le32(fixed + HDR_FLAGS) & DS_FLAG_WEIGHTS) != 0;
	if (nt < 1 || nt > ESD_DS_MAX_TABLES || hb != header_bytes(nt, r->bags, named))
		return esd_ds_fail(-EPROTO,
		                   "%s: header at byte 0: %u tables / %u header bytes "
		                   "inconsistent",
		                   path, nt, hb);
	if (r->file_size < hb)
		return esd_ds_fail(-EPROTO, "%s: truncated: %llu bytes, the header needs %u", path,
		                   (unsigned long long)r->file_size, hb);
	uint8_t *h = malloc(hb);
	if (!h)
		return -ENOMEM;
	rc = read_at(r, h, hb, 0);
	if (rc)
		goto out;
	if (XXH64(h, hb - 8, 0) != esd_get_le64(h + hb - 8)) {
		rc = esd_ds_fail(-ESD_EBADSUM, "%s: header checksum mismatch (bytes 0..%u)", path,
		                 hb - 1);
		goto out;
	}
	struct esd_ds_info *in = &r->info;
	memcpy(in->shape, h + HDR_SHAPE, ESD_DS_NAME_LEN - 1);
	in->ntables = nt;
	in->ndense = esd_get_le32(h + HDR_NDENSE);
	in->dense_format = esd_get_le32(h + HDR_DENSE_FORMAT);
	in->block_samples = esd_get_le32(h + HDR_BLOCK_SAMPLES);
	uint32_t flags = esd_get_le32(h + HDR_FLAGS);
	in->origin = esd_get_le32(h + HDR_ORIGIN);
	in->nsamples = esd_get_le64(h + HDR_NSAMPLES);
	r->nblocks = esd_get_le64(h + HDR_NBLOCKS);
	r->index_off = esd_get_le64(h + HDR_INDEX_OFFSET);
	in->seed = esd_get_le64(h + HDR_SEED);
	in->drift = esd_get_lef64(h + HDR_DRIFT);
	in->scale = esd_get_lef64(h + HDR_SCALE);
	in->max_rows = esd_get_le64(h + HDR_MAX_ROWS);
	in->skipped = esd_get_le64(h + HDR_SKIPPED);
	in->zstd_level = (int32_t)esd_get_le32(h + HDR_ZSTD_LEVEL);
	memcpy(in->source, h + HDR_SOURCE, ESD_DS_SOURCE_LEN - 1);
	for (uint32_t t = 0; t < nt; t++) {
		const uint8_t *e = h + HDR_FIXED + (size_t)t * TABLE_ENTRY;
		in->rows[t] = esd_get_le64(e);
		in->zipf[t] = esd_get_lef64(e + 8);
		const uint8_t *bag = h + HDR_FIXED + (size_t)nt * TABLE_ENTRY + 4 * t;
		in->max_bag[t] = r->bags ? esd_get_le32(bag) : 0;
		if (named) /* a name that fills its 32 bytes is refused below */
			memcpy(in->names[t],
			       h + names_offset(nt, r->bags) + (size_t)t * ESD_DS_NAME_LEN,
			       ESD_DS_NAME_LEN);
	}
	r->hdr_bytes = hb;
	char why[160];
	if (esd_ds_info_check(in, why, sizeof(why)) || in->block_samples < 1 ||
	    (flags & ~(DS_FLAG_ZSTD | DS_FLAG_NAMES | DS_FLAG_WEIGHTS)) ||
	    (named && !esd_ds_has_names(in))) {
		if (!esd_ds_info_check(in, why, sizeof(why)))
			snprintf(why, sizeof(why), "block size %u / flags %#x invalid",
			         in->block_samples, flags);
		rc = esd_ds_fail(-EPROTO, "%s: header: %s", path, why);
		goto out;
	}
#ifndef ESD_DATA_HAVE_ZSTD
	if (flags & DS_FLAG_ZSTD) {
		rc = esd_ds_fail(-ENOTSUP, "%s: zstd-compressed stream, built without zstd", path);
		goto out;
	}
#endif
	if (r->index_off == 0) {
		rc = esd_ds_fail(-EPROTO,
		                 "%s: incomplete stream: the writer never closed it (no "
		                 "block index; header at byte 0)",
		                 path);
		goto out;
	}
	uint64_t want = in->nsamples / in->block_samples +
			(in->nsamples % in->block_samples != 0); /* no overflow */
	if (r->nblocks != want) {
		rc = esd_ds_fail(-EPROTO, "%s: header: %llu blocks for %llu samples of %u", path,
		                 (unsigned long long)r->nblocks, (unsigned long long)in->nsamples,
		                 in->block_samples);
		goto out;
	}
	r->bs = in->block_samples;
	r->sbytes = sample_bytes(in);
	for (uint32_t t = 0; t < nt; t++)
		r->idw[t] = id_width(in->rows[t]);
	rc = 0;
out:
	free(h);
	return rc;
}

static int parse_index(struct esd_ds_reader *r)
{
	const char *path = r->path;
	uint64_t hb = r->hdr_bytes;
	/* nblocks is bounded by the file size before anything is allocated */
	if (r->nblocks > r->file_size / 8 || r->index_off < hb ||
	    r->index_off + INDEX_HDR + r->nblocks * 8 + 8 != r->file_size) {
		return esd_ds_fail(
		    -EPROTO,
		    "%s: truncated or damaged: file has %llu bytes, the "
		    "index at byte %llu with %llu blocks needs %llu",
		    path, (unsigned long long)r->file_size, (unsigned long long)r->index_off,
		    (unsigned long long)r->nblocks,
		    (unsigned long long)(r->index_off + INDEX_HDR + r->nblocks * 8 + 8));
	}
	size_t ib = INDEX_HDR + r->nblocks * 8 + 8;
	uint8_t *ix = malloc(ib);
	r->index = malloc((r->nblocks + 1) * sizeof(uint64_t));
	int rc = -ENOMEM;
	if (!ix || !r->index)
		goto out;
	rc = read_at(r, ix, ib, r->index_off);
	if (rc)
		goto out;
	if (esd_get_le32(ix) != DS_INDEX_MAGIC || esd_get_le64(ix + 8) != r->nblocks) {
		rc = esd_ds_fail(-EPROTO, "%s: block index at byte %llu: bad magic or count", path,
		                 (unsigned long long)r->index_off);
		goto out;
	}
	if (XXH64(ix, ib - 8, 0) != esd_get_le64(ix + ib - 8)) {
		rc = esd_ds_fail(-ESD_EBADSUM, "%s: block index at byte %llu: checksum mismatch",
		                 path, (unsigned long long)r->index_off);
		goto out;
	}
	uint64_t prev = hb;
	for (uint64_t b = 0; b < r->nblocks; b++) {
		uint64_t o = esd_get_le64(ix + INDEX_HDR + b * 8);
		if ((b == 0 && o != hb) || o < prev || o > r->index_off - BLOCK_HDR ||
		    (b > 0 && o - prev < BLOCK_HDR)) {
			rc = esd_ds_fail(-EPROTO,
			                 "%s: block index: block %llu at byte %llu out of "
			                 "order",
			                 path, (unsigned long long)b, (unsigned long long)o);
			goto out;
		}
		r->index[b] = o;
		prev = o;
	}
	r->index[r->nblocks] = r->index_off;
	rc = 0;
out:
	free(ix);
	return rc;
}

int esd_ds_open(const char *path, struct esd_ds_reader **out)
{
	struct esd_ds_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	int rc = -ENOMEM;
	r->cur = -1;
	r->path = strdup(path);
	if (!r->path)
		goto fail_alloc;
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		rc = esd_neg_errno();
		esd_ds_fail(rc, "%s: cannot open: %s", path, esd_strerror(rc));
		goto fail_alloc;
	}
	struct stat st;
	if (fstat(r->fd, &st)) {
		rc = esd_neg_errno();
		goto fail_open;
	}
	r->file_size = (uint64_t)st.st_size;
	rc = parse_header(r);
	if (!rc)
		rc = parse_index(r);
	if (rc)
		goto fail_open;
	posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*out = r;
	return 0;

fail_open:
	close(r->fd);
fail_alloc:
	free(r->index);
	free(r->path);
	free(r);
	return rc;
}

const struct esd_ds_info *esd_ds_reader_info(const struct esd_ds_reader *r)
{
	return &r->info;
}

static int grow(uint8_t **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	uint8_t *n = realloc(*p, need);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = need;
	return 0;
}

static float get_wt(const struct esd_ds_reader *r, uint32_t t, uint32_t j)
{
	float v = 1.0f;
	if (r->info.weighted)
		memcpy(&v, r->wts[t] + (size_t)j * 4, 4);
	return v;
}

static uint64_t get_id(const uint8_t *ids, unsigned width, uint32_t j)
{
	if (width == 4) {
		uint32_t v;
		memcpy(&v, ids + (size_t)j * 4, 4);
		return v;
	}
	uint64_t v;
	memcpy(&v, ids + (size_t)j * 8, 8);
	return v;
}

/* Point the block's columns into payload p of raw bytes: labels, dense,
 * then per table its IDs (a bag table: its n lengths first, each within
 * max_bag, then their IDs; a weighted stream: then their weights); the
 * columns must end exactly at raw. */
static int decode_columns(struct esd_ds_reader *r, const uint8_t *p, uint64_t raw, uint32_t n,
                          unsigned long long ob, unsigned long long oo)
{
	const struct esd_ds_info *in = &r->info;
	const uint8_t *end = p + raw;
	uint64_t head = (uint64_t)n * (1 + (uint64_t)in->ndense * dense_width(in->dense_format));
	if (head > raw)
		goto short_payload;
	r->labels = p;
	p += n;
	r->dense = p;
	p += (size_t)n * in->ndense * dense_width(in->dense_format);
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint64_t count = n;
		if (is_bag(in, t)) {
			unsigned lw = len_width(in->max_bag[t]);
			if ((uint64_t)(end - p) < (uint64_t)n * lw)
				goto short_payload;
			if (r->boff_cap[t] < (size_t)n + 1) {
				uint32_t *nb = realloc(r->boff[t], ((size_t)n + 1) * sizeof(uint32_t));
				if (!nb)
					return -ENOMEM;
				r->boff[t] = nb;
				r->boff_cap[t] = (size_t)n + 1;
			}
			uint32_t *bo = r->boff[t];
			bo[0] = 0;
			for (uint32_t i = 0; i < n; i++) {
				uint32_t l = lw == 1 ? p[i] : (uint32_t)p[2 * i] | (uint32_t)p[2 * i + 1] << 8;
				if (l > in->max_bag[t])
					return esd_ds_fail(
					    -EPROTO,
					    "%s: block %llu at byte %llu: sample %llu table %u: "
					    "a bag of %u IDs, the table's are at most %u",
					    r->path, ob, oo,
					    (unsigned long long)(r->bs * (uint64_t)ob + i), t, l,
					    in->max_bag[t]);
				bo[i + 1] = bo[i] + l;
			}
			p += (size_t)n * lw;
			count = bo[n];
		} else {
			free(r->boff[t]);
			r->boff[t] = NULL;
			r->boff_cap[t] = 0;
		}
		if ((uint64_t)(end - p) < count * r->idw[t])
			goto short_payload;
		r->ids[t] = p;
		p += count * r->idw[t];
		if (in->weighted) {
			if ((uint64_t)(end - p) < count * 4)
				goto short_payload;
			r->wts[t] = p;
			p += count * 4;
		}
	}
	if (p == end)
		return 0;
short_payload:
	return esd_ds_fail(-EPROTO,
	                   "%s: block %llu at byte %llu: its %llu payload bytes do not hold "
	                   "its columns",
	                   r->path, ob, oo, (unsigned long long)raw);
}

/* Read, check and decode block b into the reader's block buffers.
 * Long: read, check, decompress and decode a block in sequence, with an error per stage
 * naming the block. */
static int load_block(struct esd_ds_reader *r, uint64_t b)
{
	const struct esd_ds_info *in = &r->info;
	uint64_t off = r->index[b];
	uint64_t len = r->index[b + 1] - off;
	uint64_t first = b * r->bs;
	uint32_t n = (uint32_t)(in->nsamples - first < r->bs ? in->nsamples - first : r->bs);
	uint64_t raw = (uint64_t)n * r->sbytes; /* with bags: the most it may be */
	unsigned long long ob = (unsigned long long)b, oo = (unsigned long long)off;

	r->cur = -1;
	if (len - BLOCK_HDR > raw + raw / 8 + 4096) /* far above any zstd bound */
		return esd_ds_fail(-EPROTO,
		                   "%s: block %llu at byte %llu: %llu bytes for %u samples",
		                   r->path, ob, oo, (unsigned long long)len, n);
	int rc = grow(&r->buf, &r->buf_cap, len);
	if (rc)
		return rc;
	rc = read_at(r, r->buf, len, off);
	if (rc)
		return rc;
	const uint8_t *bh = r->buf;
	uint32_t flags = esd_get_le32(bh + BLK_FLAGS);
	if (esd_get_le32(bh + BLK_MAGIC) != DS_BLOCK_MAGIC)
		return esd_ds_fail(-EPROTO, "%s: block %llu at byte %llu: bad block magic", r->path,
		                   ob, oo);
	XXH64_state_t st;
	XXH64_reset(&st, 0);
	XXH64_update(&st, bh, BLK_SUM);
	XXH64_update(&st, bh + BLOCK_HDR, len - BLOCK_HDR);
	if (XXH64_digest(&st) != esd_get_le64(bh + BLK_SUM))
		return esd_ds_fail(-ESD_EBADSUM, "%s: block %llu at byte %llu: checksum mismatch",
		                   r->path, ob, oo);
	if (esd_get_le32(bh + BLK_N) != n || esd_get_le64(bh + BLK_FIRST) != first ||
	    esd_get_le32(bh + BLK_STORED) != len - BLOCK_HDR ||
	    (r->bags ? esd_get_le32(bh + BLK_RAW) > raw : esd_get_le32(bh + BLK_RAW) != raw) ||
	    (flags & ~DS_FLAG_ZSTD))
		return esd_ds_fail(-EPROTO,
		                   "%s: block %llu at byte %llu: header does not match the "
		                   "stream (%u samples from %llu expected)",
		                   r->path, ob, oo, n, (unsigned long long)first);
	if (r->bags)
		raw = esd_get_le32(bh + BLK_RAW);
	const uint8_t *p = bh + BLOCK_HDR;
	if (flags & DS_FLAG_ZSTD) {
#ifdef ESD_DATA_HAVE_ZSTD
		rc = grow(&r->zraw, &r->zraw_cap, raw ? raw : 1);
		if (rc)
			return rc;
		size_t z = ZSTD_decompress(r->zraw, raw, p, len - BLOCK_HDR);
		if (ZSTD_isError(z) || z != raw)
			return esd_ds_fail(-EPROTO, "%s: block %llu at byte %llu: zstd: %s",
			                   r->path, ob, oo,
			                   ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short");
		p = r->zraw;
#else
		return esd_ds_fail(-ENOTSUP, "%s: block %llu: zstd, built without zstd", r->path,
		                   ob);
#endif
	} else if (len - BLOCK_HDR != raw) {
		return esd_ds_fail(-EPROTO,
		                   "%s: block %llu at byte %llu: %llu payload bytes, %llu "
		                   "expected",
		                   r->path, ob, oo, (unsigned long long)(len - BLOCK_HDR),
		                   (unsigned long long)raw);
	}
	rc = decode_columns(r, p, raw, n, ob, oo);
	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++)
		if (r->labels[i] > 1)
			return esd_ds_fail(
			    -EPROTO, "%s: block %llu at byte %llu: sample %llu: label %u", r->path,
			    ob, oo, (unsigned long long)(first + i), r->labels[i]);
	for (uint32_t t = 0; t < in->ntables; t++) {
		for (uint32_t i = 0; i < n; i++) {
			uint32_t a = r->boff[t] ? r->boff[t][i] : i;
			uint32_t z = r->boff[t] ? r->boff[t][i + 1] : i + 1;
			for (uint32_t j = a; j < z; j++) {
				uint64_t id = get_id(r->ids[t], r->idw[t], j);
				if (!isfinite(get_wt(r, t, j)))
					return esd_ds_fail(
					    -EPROTO,
					    "%s: block %llu at byte %llu: sample %llu "
					    "table %u: the weight of ID %u of the bag is not finite",
					    r->path, ob, oo, (unsigned long long)(first + i), t,
					    j - a + 1);
				if (id >= in->rows[t])
					return esd_ds_fail(
					    -EPROTO,
					    "%s: block %llu at byte %llu: sample %llu "
					    "table %u: id %llu >= %llu rows",
					    r->path, ob, oo, (unsigned long long)(first + i), t,
					    (unsigned long long)id,
					    (unsigned long long)in->rows[t]);
			}
		}
	}
	r->cur = (int64_t)b;
	r->cur_n = n;
	return 0;
}

static void copy_out(struct esd_ds_reader *r, uint32_t i, uint32_t m, float *labels, float *dense,
                     esd_key_t *keys)
{
	const struct esd_ds_info *in = &r->info;
	if (labels)
		for (uint32_t s = 0; s < m; s++)
			labels[s] = r->labels[i + s];
	if (dense && in->ndense) {
		size_t nd = in->ndense;
		if (in->dense_format == ESD_DS_DENSE_F32) {
			memcpy(dense, r->dense + (size_t)i * nd * 4, (size_t)m * nd * 4);
		} else {
			const uint8_t *d = r->dense + (size_t)i * nd * 2;
			for (size_t j = 0; j < (size_t)m * nd; j++) {
				uint16_t h;
				memcpy(&h, d + 2 * j, 2);
				dense[j] = bf16_to_f32(h);
			}
		}
	}
	if (keys) {
		uint32_t nt = in->ntables;
		for (uint32_t t = 0; t < nt; t++) {
			esd_key_t hi = esd_key_make(t, 0);
			if (r->idw[t] == 4) {
				const uint8_t *c = r->ids[t] + (size_t)i * 4;
				for (uint32_t s = 0; s < m; s++) {
					uint32_t v;
					memcpy(&v, c + (size_t)s * 4, 4);
					keys[(size_t)s * nt + t] = hi | v;
				}
			} else {
				const uint8_t *c = r->ids[t] + (size_t)i * 8;
				for (uint32_t s = 0; s < m; s++) {
					uint64_t v;
					memcpy(&v, c + (size_t)s * 8, 8);
					keys[(size_t)s * nt + t] = hi | v;
				}
			}
		}
	}
}

/* Decode the block holding the cursor unless it is the current one; *i:
 * the cursor's sample within it. On a bad block the cursor goes back to
 * start (the call's first sample), so nothing is returned twice. */
static int enter_block(struct esd_ds_reader *r, uint64_t start, uint32_t *i)
{
	uint64_t b = r->cursor / r->bs;
	if (r->cur != (int64_t)b) {
		int rc = load_block(r, b);
		if (rc) {
			r->cursor = start;
			return rc;
		}
	}
	*i = (uint32_t)(r->cursor - b * r->bs);
	return 0;
}

int64_t esd_ds_read(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                    esd_key_t *keys)
{
	const struct esd_ds_info *in = &r->info;
	uint64_t start = r->cursor, got = 0;
	for (uint32_t t = 0; r->bags && keys && t < in->ntables; t++) /* only a version 2 has bags */
		if (is_bag(in, t))
			return esd_ds_fail(
			    -ENOTSUP,
			    "%s: table %u has bags of up to %u IDs (a multi-hot "
			    "stream, docs/multihot.md): this reader takes one ID per "
			    "table",
			    r->path, t, in->max_bag[t]);
	if (k > INT64_MAX)
		k = INT64_MAX;
	while (got < k && r->cursor < in->nsamples) {
		uint32_t i;
		int rc = enter_block(r, start, &i);
		if (rc)
			return rc;
		uint64_t m = r->cur_n - i;
		if (m > k - got)
			m = k - got;
		copy_out(r, i, (uint32_t)m, labels ? labels + got : NULL,
		         dense ? dense + got * in->ndense : NULL,
		         keys ? keys + got * in->ntables : NULL);
		got += m;
		r->cursor += m;
	}
	return (int64_t)got;
}

/* The keys of sample i of the current block into keys (at most cap), its
 * bags' starts (relative to base) into bo[ntables]. Returns the keys, or
 * UINT64_MAX when they do not fit. */
static uint64_t copy_sample_bags(const struct esd_ds_reader *r, uint32_t i, esd_key_t *keys,
                                 float *wts, uint64_t cap, uint64_t base, uint32_t *bo)
{
	const struct esd_ds_info *in = &r->info;
	uint64_t k = 0;
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint32_t a = r->boff[t] ? r->boff[t][i] : i;
		k += (r->boff[t] ? r->boff[t][i + 1] : i + 1) - a;
	}
	if (k > cap)
		return UINT64_MAX;
	k = 0;
	for (uint32_t t = 0; t < in->ntables; t++) {
		uint32_t a = r->boff[t] ? r->boff[t][i] : i;
		uint32_t z = r->boff[t] ? r->boff[t][i + 1] : i + 1;
		bo[t] = (uint32_t)(base + k);
		for (uint32_t j = a; j < z; j++) {
			if (wts)
				wts[k] = get_wt(r, t, j);
			keys[k++] = esd_key_make(t, get_id(r->ids[t], r->idw[t], j));
		}
	}
	return k;
}

int64_t esd_ds_read_bags(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                         esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off)
{
	return esd_ds_read_bags_w(r, k, labels, dense, keys, keys_cap, bag_off, NULL);
}

int64_t esd_ds_read_bags_w(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                           esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off,
                           float *weights)
{
	const struct esd_ds_info *in = &r->info;
	uint64_t start = r->cursor, got = 0, used = 0;
	while (got < k && r->cursor < in->nsamples) {
		uint32_t i;
		int rc = enter_block(r, start, &i);
		if (rc)
			return rc;
		uint64_t nk = copy_sample_bags(r, i, keys + used, weights ? weights + used : NULL,
		                               keys_cap - used, used,
		                               bag_off + got * in->ntables);
		if (nk == UINT64_MAX) {
			if (got)
				break;
			return esd_ds_fail(-ENOSPC,
			                   "%s: sample %llu has more keys than the %llu of the "
			                   "caller's array",
			                   r->path, (unsigned long long)r->cursor,
			                   (unsigned long long)keys_cap);
		}
		copy_out(r, i, 1, labels ? labels + got : NULL,
		         dense ? dense + got * in->ndense : NULL, NULL);
		used += nk;
		got++;
		r->cursor++;
	}
	bag_off[got * in->ntables] = (uint32_t)used;
	return (int64_t)got;
}

int esd_ds_read_wrap(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                     esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off)
{
	return esd_ds_read_wrap_w(r, k, labels, dense, keys, keys_cap, bag_off, NULL);
}

int esd_ds_read_wrap_w(struct esd_ds_reader *r, uint64_t k, float *labels, float *dense,
                       esd_key_t *keys, uint64_t keys_cap, uint32_t *bag_off, float *weights)
{
	const uint32_t T = r->info.ntables, D = r->info.ndense;
	uint64_t got = 0;
	uint32_t nk = 0;
	while (got < k) {
		uint32_t *bo = bag_off + got * T;
		int64_t n = esd_ds_read_bags_w(r, k - got, labels ? labels + got : NULL,
		                               dense ? dense + got * D : NULL, keys + nk,
		                               keys_cap - nk, bo, weights ? weights + nk : NULL);
		if (n < 0)
			return (int)n;
		if (n == 0) {
			if (r->cursor == 0)
				return esd_ds_fail(-ENODATA, "%s: no samples", r->path);
			r->cursor = 0;
			continue;
		}
		for (uint64_t j = 0; j <= (uint64_t)n * T; j++) /* relative to keys + nk */
			bo[j] += nk;
		nk = bo[(uint64_t)n * T];
		got += (uint64_t)n;
	}
	return 0;
}

uint64_t esd_ds_tell(const struct esd_ds_reader *r)
{
	return r->cursor;
}

int esd_ds_seek(struct esd_ds_reader *r, uint64_t cursor)
{
	if (cursor > r->info.nsamples)
		return esd_ds_fail(-EINVAL, "%s: seek to sample %llu past the end (%llu samples)",
		                   r->path, (unsigned long long)cursor,
		                   (unsigned long long)r->info.nsamples);
	r->cursor = cursor;
	return 0;
}

void esd_ds_rewind(struct esd_ds_reader *r)
{
	r->cursor = 0;
}

int esd_ds_digest(struct esd_ds_reader *r, uint64_t *out)
{
	XXH64_state_t st;
	uint64_t hb = r->hdr_bytes;
	uint8_t buf[BLOCK_HDR];
	int rc = 0;

	/* the header's checksum stands for the header, each block's for
	 * its header and payload (readers check them): hashing the
	 * checksums hashes the content */
	XXH64_reset(&st, 0);
	rc = read_at(r, buf, 8, hb - 8);
	if (!rc)
		XXH64_update(&st, buf, 8);
	for (uint64_t b = 0; b < r->nblocks && !rc; b++) {
		rc = read_at(r, buf, BLOCK_HDR, r->index[b]);
		if (!rc)
			XXH64_update(&st, buf + BLK_SUM, 8);
	}
	if (!rc)
		*out = XXH64_digest(&st);
	return rc;
}

const char *esd_ds_path(const struct esd_ds_reader *r)
{
	return r->path;
}

void esd_ds_close(struct esd_ds_reader *r)
{
	if (!r)
		return;
	close(r->fd);
	free(r->index);
	free(r->buf);
	free(r->zraw);
	for (uint32_t t = 0; t < ESD_DS_MAX_TABLES; t++)
		free(r->boff[t]);
	free(r->path);
	free(r);
}
