/*
 * convert.c - streams a Criteo Kaggle / Avazu / Criteo Sponsored Search file
 * through the line parsers into a dataset stream. Memory is one input
 * buffer (bounded by the longest accepted line) and one output block,
 * whatever the input size; a progress bar goes to stderr when asked.
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

/* Long: the conversion loop (read a line, parse, map keys, append, write a full block, count
 * bad lines) keeps its state in the loop's locals. */
int ds_convert(const struct ds_convert_opts *o, struct ds_convert_result *res)
{
	static const uint32_t origin[] = {ESD_DS_ORIGIN_CRITEO_KAGGLE, ESD_DS_ORIGIN_AVAZU,
	                                  ESD_DS_ORIGIN_CRITEO_SEARCH};
	struct ds_convert_result r = {0, 0, 0};
	struct ds_parse_ctx ctx;
	struct esd_ds_info info;
	struct ds_sample *s = NULL;
	struct esd_ds_writer *w = NULL;
	struct lines l = {0};
	const char *in = o->in_path;
	char why[256];
	int rc;

	ds_parse_init(&ctx, o->fmt, NULL);
	memset(&info, 0, sizeof(info));
	rc = esd_ds_shape(o->fmt == DS_FMT_AVAZU    ? "avazu"
	                  : o->fmt == DS_FMT_SEARCH ? "criteo-search"
	                                            : "criteo-kaggle",
	                  &info);
	if (rc)
		return rc;
	if (o->rows) {
		if (o->rows > ESD_DS_MAX_ROWS)
			return ds_fail(-EINVAL, "--rows %llu above 2^48-1",
			               (unsigned long long)o->rows);
		for (uint32_t t = 0; t < info.ntables; t++)
			info.rows[t] = o->rows;
	}
	rc = esd_ds_scale_rows(&info, o->scale >= 1.0 ? o->scale : 1.0, o->max_rows);
	if (rc)
		return rc;
	for (uint32_t t = 0; t < info.ntables; t++)
		ctx.rows[t] = info.rows[t];
	info.dense_format = o->dense_format;
	info.zstd_level = o->zstd_level;
	info.origin = origin[o->fmt];
	snprintf(info.source, sizeof(info.source), "%s", base_name(in));

	s = calloc(1, sizeof(*s));
	l.cap = DS_MAX_LINE + READ_CHUNK + 2;
	l.buf = malloc(l.cap);
	if (!s || !l.buf) {
		rc = -ENOMEM;
		goto out_alloc;
	}
	l.f = strcmp(in, "-") ? fopen(in, "rb") : stdin;
	if (!l.f) {
		rc = esd_neg_errno();
		ds_fail(rc, "%s: cannot open: %s", in, esd_strerror(rc));
		goto out_alloc;
	}
	uint64_t total = 0;
	struct stat st;
	if (!fstat(fileno(l.f), &st) && S_ISREG(st.st_mode))
		total = (uint64_t)st.st_size;

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
			rc = ds_fail(got, "%s: read error after line %llu", in,
			             (unsigned long long)r.lines);
			goto out_writer;
		}
		r.lines++;
		if (got == 2) {
			snprintf(why, sizeof(why), "line longer than %u bytes", DS_MAX_LINE);
			goto bad_line;
		}
		if (r.lines == 1 && o->fmt == DS_FMT_AVAZU) {
			if (ds_parse_header(&ctx, line, len, why, sizeof(why))) {
				rc = ds_fail(-EINVAL, "%s:1: %s", in, why);
				goto out_writer;
			}
			continue;
		}
		if (r.lines == 1 && o->fmt == DS_FMT_SEARCH && ds_is_search_header(line, len))
			continue;
		if (len == 0 || (len == 1 && line[0] == '\r')) {
			snprintf(why, sizeof(why), "empty line");
			goto bad_line;
		}
		if (ds_parse_line(&ctx, line, len, s, why, sizeof(why)))
			goto bad_line;
		rc = esd_ds_writer_append(w, s->label, s->dense, s->ids);
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
			rc = ds_fail(-EINVAL, "%s:%llu: %s", in, (unsigned long long)r.lines, why);
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
		rc = ds_fail(-EINVAL, "%s:1: empty file, expected the Avazu header line", in);
		goto out_writer;
	}
	if (!esd_ds_writer_count(w) && !o->allow_empty) {
		rc = ds_fail(-ENODATA, "%s: no samples (%llu lines read, %llu bad lines skipped): "
			     "%s not written (--allow-empty writes an empty stream)",
			     in, (unsigned long long)r.lines, (unsigned long long)r.skipped,
			     o->out_path);
		goto out_writer;
	}
	if (o->progress)
		progress(&l, total, r.lines, t0, 1);
	/* the skipped count is provenance: patch it in before the header is final */
	ds_writer_set_skipped(w, r.skipped);
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
	free(s);
	if (res)
		*res = r;
	return rc;
}
