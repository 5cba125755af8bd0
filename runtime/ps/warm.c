/*
 * Warm start: a fresh job's shard loads its rows from an export
 * (tools/esd-export: manifest.json, one float32 .npy of [rows, dim] per
 * table, the dense table's tensors) instead of initialising them. Every
 * row of every table whose key is this shard's is created with the
 * file's value, the optimizer's initial state and clock 0; shard 0 also
 * takes the dense table from dense/{W1,b1,w2,b2,wd}.npy. Anything that
 * does not match the job (the manifest's dim or table count, a file's
 * dtype, shape or size, a non-finite value) refuses the start, naming the
 * file and both numbers.
 */
#include "ps.h"

#include <errno.h>
#include <esd/dataset.h>
#include <esd/err.h>
#include <esd/job.h>
#include <esd/log.h>
#include <esd/optim.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NPY_MAGIC      "\x93NUMPY"
#define NPY_MAX_HEADER 65536u
#define LOAD_ROWS      4096u

/* An open .npy file of float32 in C order. */
struct npy {
	FILE *f;
	char path[1100];
	uint64_t shape[2];
	unsigned ndim;
	uint64_t count; /* elements */
};

static int npy_fail(const struct npy *n, const char *what)
{
	ESD_ERR("ps", "ps.warm_start: %s: %s", n->path, what);
	return -EINVAL;
}

/* The shape tuple "(a, b)", "(a,)" or "()" after 'shape': in the header. */
static int npy_parse_shape(struct npy *n, const char *hdr)
{
	const char *p = strstr(hdr, "'shape':");
	if (!p || !(p = strchr(p, '(')))
		return npy_fail(n, "its header has no shape");
	p++;
	n->ndim = 0;
	n->count = 1;
	while (*p && *p != ')') {
		char *end;
		if (*p == ' ' || *p == ',') {
			p++;
			continue;
		}
		unsigned long long v = strtoull(p, &end, 10);
		if (end == p || n->ndim == 2)
			return npy_fail(n, "its shape is not (rows, dim) or (n,)");
		n->shape[n->ndim++] = v;
		n->count *= v;
		p = end;
	}
	return *p == ')' ? 0 : npy_fail(n, "its header's shape is not closed");
}

/* Header of a .npy (format 1.0 to 3.0): float32 little-endian, C order,
 * and a file size that is exactly header + data. */
static int npy_check_header(struct npy *n)
{
	unsigned char pre[12];
	if (fread(pre, 1, 10, n->f) != 10 || memcmp(pre, NPY_MAGIC, 6))
		return npy_fail(n, "not a .npy file (no \\x93NUMPY magic)");
	uint32_t hlen, off;
	if (pre[6] == 1) {
		hlen = pre[8] | (uint32_t)pre[9] << 8;
		off = 10;
	} else if (pre[6] == 2 || pre[6] == 3) {
		if (fread(pre + 10, 1, 2, n->f) != 2)
			return npy_fail(n, "truncated in its header");
		hlen = pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
		       (uint32_t)pre[11] << 24;
		off = 12;
	} else {
		return npy_fail(n, "a .npy format version this reader does not know");
	}
	if (hlen > NPY_MAX_HEADER)
		return npy_fail(n, "its header is too long");
	char *hdr = calloc(1, hlen + 1);
	if (!hdr)
		return -ENOMEM;
	int rc = 0;
	if (fread(hdr, 1, hlen, n->f) != hlen)
		rc = npy_fail(n, "truncated in its header");
	else if (!strstr(hdr, "'descr': '<f4'"))
		rc = npy_fail(n, "its dtype is not float32 little-endian ('descr': '<f4')");
	else if (!strstr(hdr, "'fortran_order': False"))
		rc = npy_fail(n, "it is in Fortran order; C order is needed");
	else
		rc = npy_parse_shape(n, hdr);
	free(hdr);
	if (rc)
		return rc;
	struct stat sb;
	if (fstat(fileno(n->f), &sb))
		return -errno;
	uint64_t want = (uint64_t)off + hlen + 4 * n->count;
	if ((uint64_t)sb.st_size != want) {
		char msg[200];
		snprintf(msg, sizeof(msg), "%llu bytes, its header says %llu (%s)",
			 (unsigned long long)sb.st_size, (unsigned long long)want,
			 (uint64_t)sb.st_size < want ? "truncated" : "trailing bytes");
		return npy_fail(n, msg);
	}
	return 0;
}

static int npy_open(struct npy *n, const char *dir, const char *name)
{
	memset(n, 0, sizeof(*n));
	snprintf(n->path, sizeof(n->path), "%s/%s", dir, name);
	n->f = fopen(n->path, "rb");
	if (!n->f) {
		int rc = -errno;
		ESD_ERR("ps", "ps.warm_start: cannot open %s: %s", n->path, esd_strerror(rc));
		return rc;
	}
	int rc = npy_check_header(n);
	if (rc)
		fclose(n->f);
	return rc;
}

/* Read count floats, refusing non-finite values (a corrupt file). */
static int npy_read(struct npy *n, float *buf, size_t count, uint64_t first)
{
	if (fread(buf, sizeof(float), count, n->f) != count)
		return npy_fail(n, "short read");
	for (size_t i = 0; i < count; i++)
		if (!isfinite(buf[i])) {
			char msg[160];
			snprintf(msg, sizeof(msg), "element %llu is not finite (%g)",
				 (unsigned long long)(first + i), (double)buf[i]);
			return npy_fail(n, msg);
		}
	return 0;
}

/* Table t's rows of this shard, from its file of [rows, d_t] (model.dims),
 * each stored at d_t. */
static int load_table(struct ps *ps, const char *dir, const char *name, uint32_t t,
		      uint64_t rows, const float *state)
{
	struct npy n;
	const unsigned d = esd_job_table_dim(&ps->job, t);
	int rc = npy_open(&n, dir, name);
	if (rc)
		return rc;
	char msg[300];
	if (n.ndim != 2 || n.shape[0] != rows || n.shape[1] != d) {
		snprintf(msg, sizeof(msg),
			 "shape (%llu, %llu) but the job's table %u is (%llu, %u): data.stream's rows "
			 "and model.dim (or the table's model.dims)",
			 (unsigned long long)n.shape[0],
			 (unsigned long long)(n.ndim == 2 ? n.shape[1] : 0), t,
			 (unsigned long long)rows, d);
		fclose(n.f);
		return npy_fail(&n, msg);
	}
	float *buf = malloc((size_t)LOAD_ROWS * d * sizeof(float));
	if (!buf) {
		fclose(n.f);
		return -ENOMEM;
	}
	uint64_t mine = 0;
	for (uint64_t lo = 0; lo < rows && !rc; lo += LOAD_ROWS) {
		size_t m = rows - lo < LOAD_ROWS ? (size_t)(rows - lo) : LOAD_ROWS;
		rc = npy_read(&n, buf, m * d, lo * d);
		for (size_t i = 0; i < m && !rc; i++) {
			esd_key_t key = esd_key_make(t, lo + i);
			if (esd_shard_of(key, ps->job.shards) != ps->shard)
				continue;
			rc = ps_store_put_value(ps->st, key, 0, buf + i * d, state);
			mine++;
		}
	}
	free(buf);
	fclose(n.f);
	if (!rc)
		ESD_DBG("ps", "warm start: %llu rows of %s", (unsigned long long)mine, n.path);
	return rc;
}

/* Shard 0's dense table from the manifest's dense tensors, in the model's
 * order (docs/model.md): each file's element count must be the job's. */
static int load_dense(struct ps *ps, const char *dir, json_t *files)
{
	static const char *const order[] = {"W1", "b1", "w2", "b2", "wd"};
	uint64_t in = ps->dense;
	for (uint32_t t = 0; t < ps->tables; t++)
		in += esd_job_table_dim(&ps->job, t);
	uint64_t h = (ps->dtab.len - 1 - ps->dense) / (in + 2);
	uint64_t want[] = {h * in, h, h, 1, ps->dense};
	size_t at = 0;
	for (size_t i = 0; i < 5; i++) {
		const char *name = json_string_value(json_object_get(files, order[i]));
		if (!name) {
			ESD_ERR("ps", "ps.warm_start: %s/manifest.json: dense.files has no %s", dir,
				order[i]);
			return -EINVAL;
		}
		struct npy n;
		int rc = npy_open(&n, dir, name);
		if (rc)
			return rc;
		if (n.count != want[i]) {
			char msg[200];
			snprintf(msg, sizeof(msg),
				 "%s of %llu floats but the job's model (model.hidden %llu, %llu "
				 "inputs) has %llu",
				 order[i], (unsigned long long)n.count, (unsigned long long)h,
				 (unsigned long long)in, (unsigned long long)want[i]);
			fclose(n.f);
			return npy_fail(&n, msg);
		}
		rc = npy_read(&n, ps->dtab.val + at, n.count, 0);
		fclose(n.f);
		if (rc)
			return rc;
		at += n.count;
	}
	esd_optim_state_init(&ps->job.optim, (unsigned)ps->dtab.len, ps->dtab.state);
	ps->dtab.clock = 0;
	return 0;
}

/* The stream's rows per table (ps->tables of them). */
static int stream_rows(const struct ps *ps, uint64_t *rows)
{
	struct esd_ds_reader *dr;
	if (esd_ds_open(ps->job.stream, &dr)) {
		ESD_ERR("ps", "ps.warm_start: cannot open data.stream %s: %s", ps->job.stream,
			esd_ds_last_error());
		return -EINVAL;
	}
	memcpy(rows, esd_ds_reader_info(dr)->rows, ps->tables * sizeof(*rows));
	esd_ds_close(dr);
	return 0;
}

/* The manifest's dim and table count against the job's. */
static int check_manifest(const struct ps *ps, const char *path, json_t *man, json_t **tables)
{
	json_t *dim = json_object_get(man, "dim");
	*tables = json_object_get(man, "tables");
	if (!json_is_integer(dim) || !json_is_array(*tables)) {
		ESD_ERR("ps", "ps.warm_start: %s is not an export's manifest (no dim or tables)",
			path);
		return -EINVAL;
	}
	if ((uint64_t)json_integer_value(dim) != ps->job.dim) {
		ESD_ERR("ps", "ps.warm_start: %s: tables of dim %lld but the job's model.dim is %u",
			path, json_integer_value(dim), ps->job.dim);
		return -EINVAL;
	}
	if (json_array_size(*tables) != ps->tables) {
		ESD_ERR("ps", "ps.warm_start: %s: %zu tables but data.stream %s has %u", path,
			json_array_size(*tables), ps->job.stream, ps->tables);
		return -EINVAL;
	}
	return 0;
}

/* Load the export in dir (ps.warm_start) into a fresh shard. 0 or -errno
 * (logged, naming the file). */
int ps_warm_start(struct ps *ps, const char *dir)
{
	char path[1100];
	json_error_t jerr;
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	json_t *man = json_load_file(path, 0, &jerr), *tables;
	if (!man) {
		ESD_ERR("ps", "ps.warm_start: %s: %s (line %d)", path, jerr.text, jerr.line);
		return -EINVAL;
	}
	uint64_t *rows = calloc(ps->tables + 1, sizeof(*rows));
	float *state = calloc(esd_optim_state_len(ps->job.optim.opt, ps->job.dim) + 1,
			      sizeof(float));
	int rc = !rows || !state ? -ENOMEM : check_manifest(ps, path, man, &tables);
	if (!rc)
		rc = stream_rows(ps, rows);
	if (!rc)
		esd_optim_state_init(&ps->job.optim, ps->job.dim, state);
	for (uint32_t t = 0; t < ps->tables && !rc; t++) {
		const char *name = json_string_value(json_object_get(json_array_get(tables, t),
								     "file"));
		if (!name) {
			ESD_ERR("ps", "ps.warm_start: %s: table %u has no file", path, t);
			rc = -EINVAL;
			break;
		}
		rc = load_table(ps, dir, name, t, rows[t], state);
	}
	json_t *dense = json_object_get(json_object_get(man, "dense"), "files");
	if (!rc && ps->dtab.val && dense)
		rc = load_dense(ps, dir, dense);
	if (!rc)
		ESD_INFO("ps", "warm start from %s: %zu rows of %u tables%s, optimizer state and "
			 "clocks fresh", dir, ps_store_count(ps->st), ps->tables,
			 ps->dtab.val && dense ? " and the dense table" : "");
	json_decref(man);
	free(rows);
	free(state);
	return rc;
}
