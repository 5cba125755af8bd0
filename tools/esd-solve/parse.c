/*
 * The cost-matrix file format of esd-solve, parsed with an error naming
 * the line for every malformed input (wrong counts, k != m * n, negative,
 * non-numeric or too large values). Separate from main() so a fuzz target
 * and the corpus replay test drive the same code.
 */
#include "parse.h"

#include <esd/dispatch_solve.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(ln, ...)                                                                              \
	do {                                                                                       \
		fail_at(err, errlen, (ln), __VA_ARGS__);                                           \
		free(cost);                                                                        \
		return -EINVAL;                                                                    \
	} while (0)

static void fail_at(char *err, size_t errlen, unsigned long line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void fail_at(char *err, size_t errlen, unsigned long line, const char *fmt, ...)
{
	int w = snprintf(err, errlen, "%lu: ", line);
	if (w < 0 || (size_t)w >= errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err + w, errlen - (size_t)w, fmt, ap);
	va_end(ap);
}

/* Parse one non-negative integer token at *p; returns 0, or -1 with a
 * message in err. */
static int parse_u64(const char **p, uint64_t max, uint64_t *out, char *err, size_t errlen)
{
	const char *s = *p;
	const char *e = s;
	while (*e && !isspace((unsigned char)*e))
		e++;
	int len = (int)(e - s);
	if (*s == '-') {
		snprintf(err, errlen, "value '%.*s' is negative (costs are non-negative integers)",
		         len, s);
		return -1;
	}
	uint64_t v = 0;
	const char *q = s;
	if (*q == '+')
		q++;
	if (q == e) {
		snprintf(err, errlen, "value '%.*s' is not a non-negative integer", len, s);
		return -1;
	}
	for (; q < e; q++) {
		if (!isdigit((unsigned char)*q)) {
			snprintf(err, errlen, "value '%.*s' is not a non-negative integer", len, s);
			return -1;
		}
		unsigned d = (unsigned)(*q - '0');
		if (v > (max - d) / 10) {
			snprintf(err, errlen, "value '%.*s' overflows (largest allowed %llu)", len,
			         s, (unsigned long long)max);
			return -1;
		}
		v = v * 10 + d;
	}
	*p = e;
	*out = v;
	return 0;
}

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\v' || *p == '\f')
		p++;
	return p;
}

int esd_solve_parse(const char *text, size_t len, struct esd_solve_input *in, char *err,
                    size_t errlen)
{
	int64_t *cost = NULL;
	if (strlen(text) != len)
		FAIL(1, "file contains a NUL byte");

	char msg[256];
	const char *p = text;
	unsigned long line = 1;
	uint64_t hdr[3];
	const char *eol = strchr(p, '\n');
	p = skip_ws(p);
	for (int q = 0; q < 3; q++) {
		if (!*p || *p == '\n')
			FAIL(line, "header must be 'k n m' (three non-negative integers), found %d",
			     q);
		if (parse_u64(&p, UINT32_MAX, &hdr[q], msg, sizeof(msg)))
			FAIL(line, "header: %s", msg);
		p = skip_ws(p);
	}
	if (*p && *p != '\n')
		FAIL(line, "header must be 'k n m': unexpected '%.*s'",
		     (int)((eol ? eol : p + strlen(p)) - p), p);
	uint64_t k = hdr[0], n = hdr[1], m = hdr[2];
	if (n < 1 || n > ESD_MAX_WORKERS)
		FAIL(line, "n = %llu workers: must be 1..%d", (unsigned long long)n,
		     ESD_MAX_WORKERS);
	if (k != m * n)
		FAIL(line, "k = %llu but m * n = %llu * %llu = %llu", (unsigned long long)k,
		     (unsigned long long)m, (unsigned long long)n, (unsigned long long)(m * n));
	if (k > ESD_SOLVE_MAX_K)
		FAIL(line, "k = %llu rows: at most %u", (unsigned long long)k, ESD_SOLVE_MAX_K);
	cost = malloc((k ? k : 1) * n * sizeof(int64_t));
	if (!cost) {
		snprintf(err, errlen, "%lu: out of memory for k = %llu", line,
		         (unsigned long long)k);
		return -ENOMEM;
	}
	if (*p == '\n')
		p++;
	for (uint64_t i = 0; i < k; i++) {
		line++;
		if (!*p)
			FAIL(line, "file ends after %llu of %llu rows", (unsigned long long)i,
			     (unsigned long long)k);
		uint64_t got = 0;
		p = skip_ws(p);
		while (*p && *p != '\n') {
			uint64_t v;
			if (got == n)
				FAIL(line, "row %llu: expected %llu values, found more",
				     (unsigned long long)i, (unsigned long long)n);
			if (parse_u64(&p, (uint64_t)ESD_COST_MAX, &v, msg, sizeof(msg)))
				FAIL(line, "row %llu, column %llu: %s", (unsigned long long)i,
				     (unsigned long long)got, msg);
			cost[i * n + got++] = (int64_t)v;
			p = skip_ws(p);
		}
		if (got != n)
			FAIL(line, "row %llu: expected %llu values, found %llu",
			     (unsigned long long)i, (unsigned long long)n, (unsigned long long)got);
		if (*p == '\n')
			p++;
	}
	/* only blank lines may follow */
	while (*p) {
		if (*p == '\n') {
			line++;
			p++;
			continue;
		}
		const char *q = skip_ws(p);
		if (*q && *q != '\n')
			FAIL(line + 1, "unexpected data after the %llu rows",
			     (unsigned long long)k);
		p = q;
	}
	in->k = (uint32_t)k;
	in->n = (uint32_t)n;
	in->m = (uint32_t)m;
	in->cost = cost;
	return 0;
}
