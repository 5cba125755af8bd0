/*
 * convert.c - streams a Criteo Kaggle / Avazu / Criteo Sponsored Search /
 * tsv-multi-hot file through the line parsers into a dataset stream.
 * Memory is one input buffer (bounded by the longest accepted line), one
 * output block and for tsv-multi-hot one line's IDs, whatever the input
 * size; a progress bar goes to stderr when asked.
 */
#include "convert.h"
#include "format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <esd/err.h>
#include <esd/log.h>

#define READ_CHUNK (1u << 20)

/* A bounded line reader over a FILE. */
struct lines {
	FILE *f;
	char *buf;
	size_t cap, start, end;
	int eof;
	uint64_t consumed; /* bytes handed out, newlines included */
};

/*
 * Next line into *line and *len (without '\n'). Returns 1, 0 at the end, -errno
 * on a read error, or 2 for a line longer than DS_MAX_LINE (skipped whole).
 */
static int next_line(struct lines *l, const char **line, size_t *len)
{
	int toolong = 0;
	for (;;) {
		char *nl = memchr(l->buf + l->start, '\n', l->end - l->start);
		if (nl) {
			size_t n = (size_t)(nl - (l->buf + l->start));
			*line = l->buf + l->start;
			*len = n;
			l->start += n + 1;
			l->consumed += n + 1;
			return toolong ? 2 : 1;
		}
		if (l->end - l->start > DS_MAX_LINE) { /* drop what we hold, keep looking */
			l->consumed += l->end - l->start;
			l->start = l->end = 0;
			toolong = 1;
		}
		if (l->eof) {
			if (l->start == l->end)
				return toolong ? 2 : 0;
			*line = l->buf + l->start;
			*len = l->end - l->start;
			l->consumed += *len;
			l->start = l->end;
			return toolong ? 2 : 1;
		}
		if (l->start) {
			memmove(l->buf, l->buf + l->start, l->end - l->start);
			l->end -= l->start;
			l->start = 0;
		}
		size_t g = fread(l->buf + l->end, 1, l->cap - l->end, l->f);
		l->end += g;
		if (g == 0) {
			if (ferror(l->f))
				return -EIO;
			l->eof = 1;
		}
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void progress(const struct lines *l, uint64_t total, uint64_t lines, double t0, int done)
{
	double dt = now_s() - t0;
	double mb = (double)l->consumed / 1e6;
	char bar[41];
	if (total) {
		double frac = (double)l->consumed / (double)total;
		int fill = (int)(frac * 40.0);
		for (int i = 0; i < 40; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[40] = 0;
		fprintf(stderr, "\r[%s] %5.1f%% %llu lines %.0f MB/s", bar, frac * 100.0,
		        (unsigned long long)lines, dt > 0 ? mb / dt : 0.0);
	} else {
		fprintf(stderr, "\r%llu lines, %.1f MB, %.0f MB/s", (unsigned long long)lines, mb,
		        dt > 0 ? mb / dt : 0.0);
	}
	if (done)
		fputc('\n', stderr);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

/* --rows: one value for every table, or one per table. */
static int apply_rows(const struct ds_convert_opts *o, struct esd_ds_info *info)
{
	if (!o->nrows)
		return 0;
	if (o->nrows != 1 && o->nrows != info->ntables)
		return esd_ds_fail(-EINVAL,
		                   "--rows: %u values for %u tables (one for all, or one a table)",
		                   o->nrows, info->ntables);
	for (uint32_t t = 0; t < info->ntables; t++) {
		uint64_t r = o->rows[o->nrows == 1 ? 0 : t];
		if (r < 1 || r > ESD_DS_MAX_ROWS)
			return esd_ds_fail(-EINVAL, "--rows %llu not in 1..2^48-1",
			                   (unsigned long long)r);
		info->rows[t] = r;
	}
	return 0;
}

/* tsv-multi-hot's shape: every table a bag table of its --max-bag bound. */
static int multi_hot_info(const struct ds_convert_opts *o, struct esd_ds_info *info)
{
	if (o->ntables < 1 || o->ntables > ESD_DS_MAX_TABLES)
		return esd_ds_fail(-EINVAL, "tsv-multi-hot: --tables %u not in 1..%u", o->ntables,
		                   ESD_DS_MAX_TABLES);
	if (o->ndense > ESD_DS_MAX_DENSE)
		return esd_ds_fail(-EINVAL, "tsv-multi-hot: --dense %u above %u", o->ndense,
		                   ESD_DS_MAX_DENSE);
	if (!o->nrows)
		return esd_ds_fail(-EINVAL,
		                   "tsv-multi-hot needs --rows (the tables' cardinalities)");
	snprintf(info->shape, sizeof(info->shape), "tsv-multi-hot");
	info->ntables = o->ntables;
	info->ndense = o->ndense;
	for (uint32_t t = 0; t < o->ntables; t++) {
		uint32_t m = o->max_bag[t] ? o->max_bag[t] : DS_DEFAULT_MAX_BAG;
		if (m < 2 || m > ESD_DS_MAX_BAG)
			return esd_ds_fail(-EINVAL,
			                   "tsv-multi-hot: table %u: --max-bag %u not in 2..%u", t,
			                   m, ESD_DS_MAX_BAG);
		info->max_bag[t] = m;
	}
	return 0;
}

/* The stream's description and the parser's context for o. */
static int stream_info(const struct ds_convert_opts *o, struct esd_ds_info *info,
                       struct ds_parse_ctx *ctx)
{
	static const uint32_t origin[] = {ESD_DS_ORIGIN_CRITEO_KAGGLE, ESD_DS_ORIGIN_AVAZU,
	                                  ESD_DS_ORIGIN_CRITEO_SEARCH, ESD_DS_ORIGIN_OTHER};
	const int mh = o->fmt == DS_FMT_MULTI_HOT;
	memset(info, 0, sizeof(*info));
	int rc = mh ? multi_hot_info(o, info) : esd_ds_shape(esd_ds_format_shape(o->fmt), info);
	if (!rc)
		rc = apply_rows(o, info);
	if (!rc)
		rc = esd_ds_scale_rows(info, o->scale >= 1.0 ? o->scale : 1.0, o->max_rows);
	if (!rc && !mh)
		esd_ds_shape_names(info, info->shape); /* the format's columns */
	char why[160];
	if (!rc && o->names && esd_ds_set_names(info, o->names, why, sizeof(why)))
		rc = esd_ds_fail(-EINVAL, "--names: %s", why);
	if (rc)
		return rc;
	if (o->weighted && !mh)
		return esd_ds_fail(-EINVAL, "--weighted: only tsv-multi-hot carries weights");
	if (mh) {
		esd_ds_parse_init_multi_hot(ctx, info->ntables, info->ndense, info->rows,
		                            info->max_bag, o->sep ? o->sep : ',');
		ctx->weighted = info->weighted = o->weighted ? 1u : 0u;
	}
	else
		esd_ds_parse_init(ctx, o->fmt, info->rows);
	info->dense_format = o->dense_format;
	info->zstd_level = o->zstd_level;
	info->origin = origin[o->fmt];
	snprintf(info->source, sizeof(info->source), "%s", base_name(o->in_path));
	/* large bags: fewer samples a block, so a full block stays within 1 GiB */
	uint64_t sb = sample_bytes(info);
	if ((uint64_t)ESD_DS_BLOCK_SAMPLES * sb > (UINT64_C(1) << 30))
		info->block_samples = (uint32_t)((UINT64_C(1) << 30) / sb);
	return 0;
}

/* tsv-multi-hot: room for a line's IDs (at most one per two bytes of a
 * line of up to longest bytes, at most every bag full). */
static int alloc_bags(struct ds_sample *s, const struct esd_ds_info *info, size_t longest)
{
	uint64_t cap = 0;
	for (uint32_t t = 0; t < info->ntables; t++)
		cap += info->max_bag[t];
	if (cap > longest / 2 + 1)
		cap = longest / 2 + 1;
	s->bag_ids = malloc((size_t)cap * sizeof(*s->bag_ids));
	s->bag_cap = (size_t)cap;
	if (info->weighted && s->bag_ids && !(s->bag_wts = malloc((size_t)cap * sizeof(float))))
		return -ENOMEM;
	return s->bag_ids ? 0 : -ENOMEM;
}

/* tsv-multi-hot --header: line 1 names the label, the dense fields and the
 * tables, tab-separated; the tables' fields become the stream's names. */
static int header_names(const char *line, size_t len, struct esd_ds_info *info, char *why,
                        size_t whylen)
{
	uint32_t want = 1 + info->ndense + info->ntables, n = 0;
	char list[ESD_DS_MAX_TABLES * ESD_DS_NAME_LEN + 1];
	size_t at = 0;
	if (len && line[len - 1] == '\r')
		len--;
	for (size_t i = 0, start = 0; i <= len; i++) {
		if (i < len && line[i] != '\t')
			continue;
		if (n >= 1 + info->ndense && n < want) {
			size_t fl = i - start;
			if (memchr(line + start, ',', fl) || fl >= ESD_DS_NAME_LEN || fl == 0) {
				snprintf(why, whylen, "field %u (table %u): '%.*s' is not a name "
				         "(1..31 bytes of [A-Za-z0-9_.:-])", n + 1,
				         n - 1 - info->ndense, (int)(fl > 40 ? 40 : fl), line + start);
				return -EINVAL;
			}
			if (at)
				list[at++] = ',';
			memcpy(list + at, line + start, fl);
			at += fl;
		}
		n++;
		start = i + 1;
	}
	list[at] = 0;
	if (n != want) {
		snprintf(why, whylen, "header of %u fields, expected %u (label, %u dense, %u tables)",
		         n, want, info->ndense, info->ntables);
		return -EINVAL;
	}
	return esd_ds_set_names(info, list, why, whylen);
}

/* --header: read line 1 and name the tables by it, before the writer
 * writes the header. */
static int read_header(struct lines *l, const char *in, struct esd_ds_info *info,
                       struct ds_convert_result *r)
{
	const char *line;
	size_t len;
	char why[256];
	int got = next_line(l, &line, &len);
	if (got < 0)
		return esd_ds_fail(got, "%s: read error in the header line", in);
	if (got == 0)
		return esd_ds_fail(-EINVAL, "%s:1: empty file, expected the header line (--header)",
		                   in);
	r->lines++;
	if (got == 2 || header_names(line, len, info, why, sizeof(why)))
		return esd_ds_fail(-EINVAL, "%s:1: %s", in,
		                   got == 2 ? "header line longer than 1 MiB" : why);
	return 0;
}

static int append(struct esd_ds_writer *w, enum ds_format fmt, const struct ds_sample *s)
{
	if (fmt == DS_FMT_MULTI_HOT)
		return esd_ds_writer_append_weighted(w, s->label, s->dense, s->lens, s->bag_ids,
		                                     s->bag_wts);
	return esd_ds_writer_append(w, s->label, s->dense, s->ids);
}

/* Long: the conversion loop (read a line, parse, map keys, append, write a full block, count
 * bad lines) keeps its state in the loop's locals. */
int esd_ds_convert(const struct ds_convert_opts *o, struct ds_convert_result *res)
{
	struct ds_convert_result r = {0, 0, 0};
	struct ds_parse_ctx ctx;
	struct esd_ds_info info;
	struct ds_sample *s = NULL;
	struct esd_ds_writer *w = NULL;
	struct lines l = {0};
	const char *in = o->in_path;
	char why[256];
	int rc;

	rc = stream_info(o, &info, &ctx);
	if (rc)
		return rc;
	s = calloc(1, sizeof(*s));
	l.cap = DS_MAX_LINE + READ_CHUNK + 2;
	l.buf = malloc(l.cap);
	if (!s || !l.buf || (o->fmt == DS_FMT_MULTI_HOT && alloc_bags(s, &info, l.cap))) {
		rc = -ENOMEM;
		goto out_alloc;
	}
	l.f = strcmp(in, "-") ? fopen(in, "rb") : stdin;
	if (!l.f) {
		rc = esd_neg_errno();
		esd_ds_fail(rc, "%s: cannot open: %s", in, esd_strerror(rc));
		goto out_alloc;
	}
	uint64_t total = 0;
	struct stat st;
	if (!fstat(fileno(l.f), &st) && S_ISREG(st.st_mode))
		total = (uint64_t)st.st_size;

	if (o->header && (rc = read_header(&l, in, &info, &r)))
		goto out_file;
	rc = esd_ds_writer_open(o->out_path, &info, &w);
	if (rc)
		goto out_file;

	double t0 = now_s(), last = t0;
	int warned = 0;
	for (;;) {
		const char *line;
		size_t len;
		int got = next_line(&l, &line, &len);
		if (got == 0)
			break;
		if (got < 0) {
			rc = esd_ds_fail(got, "%s: read error after line %llu", in,
			                 (unsigned long long)r.lines);
			goto out_writer;
		}
		r.lines++;
		if (got == 2) {
			snprintf(why, sizeof(why), "line longer than %u bytes", DS_MAX_LINE);
			goto bad_line;
		}
		if (r.lines == 1 && o->fmt == DS_FMT_AVAZU) {
			if (esd_ds_parse_header(&ctx, line, len, why, sizeof(why))) {
				rc = esd_ds_fail(-EINVAL, "%s:1: %s", in, why);
				goto out_writer;
			}
			continue;
		}
		if (r.lines == 1 && o->fmt == DS_FMT_SEARCH && esd_ds_is_search_header(line, len))
			continue;
		if (len == 0 || (len == 1 && line[0] == '\r')) {
			snprintf(why, sizeof(why), "empty line");
			goto bad_line;
		}
		if (esd_ds_parse_line(&ctx, line, len, s, why, sizeof(why)))
			goto bad_line;
		rc = append(w, o->fmt, s);
		if (rc)
			goto out_writer;
		r.samples++;
		if (o->limit && r.samples >= o->limit)
			break;
		goto next;
	bad_line:
		if (!o->skip_bad) {
			if (o->progress)
				fputc('\n', stderr);
			rc = esd_ds_fail(-EINVAL, "%s:%llu: %s", in, (unsigned long long)r.lines,
			                 why);
			goto out_writer;
		}
		r.skipped++;
		if (warned++ < 5)
			ESD_WARN("data", "%s:%llu: skipped: %s", in, (unsigned long long)r.lines,
			         why);
	next:
		if (o->progress && (r.lines & 0xfff) == 0) {
			double t = now_s();
			if (t - last > 0.2) {
				progress(&l, total, r.lines, t0, 0);
				last = t;
			}
		}
	}
	if (o->fmt == DS_FMT_AVAZU && r.lines == 0) {
		rc = esd_ds_fail(-EINVAL, "%s:1: empty file, expected the Avazu header line", in);
		goto out_writer;
	}
	if (!esd_ds_writer_count(w) && !o->allow_empty) {
		rc = esd_ds_fail(-ENODATA,
		                 "%s: no samples (%llu lines read, %llu bad lines skipped): "
		                 "%s not written (--allow-empty writes an empty stream)",
		                 in, (unsigned long long)r.lines, (unsigned long long)r.skipped,
		                 o->out_path);
		goto out_writer;
	}
	if (o->progress)
		progress(&l, total, r.lines, t0, 1);
	/* the skipped count is provenance: patch it in before the header is final */
	esd_ds_writer_set_skipped(w, r.skipped);
	rc = esd_ds_writer_close(w);
	w = NULL;
	if (rc)
		unlink(o->out_path);
	goto out_file;

out_writer:
	esd_ds_writer_discard(w);
out_file:
	if (l.f && l.f != stdin)
		fclose(l.f);
out_alloc:
	free(l.buf);
	if (s) {
		free(s->bag_ids);
		free(s->bag_wts);
	}
	free(s);
	if (res)
		*res = r;
	return rc;
}
