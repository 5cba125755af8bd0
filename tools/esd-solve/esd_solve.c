/*
 * esd-solve: run a decision method (heu, opt, hungarian, hybrid) on a cost
 * matrix read from a file, so a decision can be reproduced, timed or
 * checked against another solver (scipy, a GPU) outside the runtime.
 *
 * Input: first line "k n m", then k lines of n non-negative integers
 * (k = m * n). Output: "cost TOTAL", then k lines with the worker index of
 * each row. --repeat R solves R times and prints "solve_us MEDIAN" on
 * stderr. A malformed file gets an error naming the line, exit status 2.
 */
#include <esd/dispatch_solve.h>
#include <esd/clock.h>
#include <esd/err.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fname = "-";

static void usage(FILE *f)
{
	fprintf(f, "usage: esd-solve [--method heu|opt|hungarian|hybrid] [--alpha A] [--repeat R]\n"
		   "                 [--heu-order row|regret] [--backend ssp|hungarian] FILE\n"
		   "  FILE: first line 'k n m', then k lines of n non-negative integers\n"
		   "        (k = m * n; '-' reads stdin)\n"
		   "  --method     decision method (default opt)\n"
		   "  --alpha      hybrid: share of each worker's slots solved exactly (default 0.25)\n"
		   "  --repeat     solve R times, print 'solve_us MEDIAN' on stderr (default 1)\n"
		   "  --heu-order  order in which heu visits the rows (default row)\n"
		   "  --backend    exact solver behind hybrid (default ssp)\n"
		   "prints 'cost TOTAL' then the worker index (0..n-1) of each row.\n");
}

static void die_line(unsigned long line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "esd-solve: %s:%lu: ", fname, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
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
		snprintf(err, errlen, "value '%.*s' is negative (costs are non-negative integers)", len,
			 s);
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
			snprintf(err, errlen, "value '%.*s' overflows (largest allowed %llu)", len, s,
				 (unsigned long long)max);
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

static char *read_all(FILE *f, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap + 1);
	if (!buf)
		return NULL;
	for (;;) {
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (n < cap) {
			if (ferror(f)) {
				free(buf);
				return NULL;
			}
			break;
		}
		cap *= 2;
		char *nb = realloc(buf, cap + 1);
		if (!nb) {
			free(buf);
			return NULL;
		}
		buf = nb;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"method", required_argument, 0, 'M'},
					     {"alpha", required_argument, 0, 'a'},
					     {"repeat", required_argument, 0, 'r'},
					     {"heu-order", required_argument, 0, 'o'},
					     {"backend", required_argument, 0, 'b'},
					     {"help", no_argument, 0, 'h'},
					     {0, 0, 0, 0}};
	enum esd_method method = ESD_METHOD_OPT;
	struct esd_hybrid_params hp = {0.25, ESD_OPT_SSP, ESD_HEU_ROW_ORDER};
	long repeat = 1;
	int repeat_given = 0;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'M':
			if (esd_method_parse(optarg, &method) || method == ESD_METHOD_LAIA ||
			    method == ESD_METHOD_VANILLA) {
				fprintf(stderr, "esd-solve: unknown method '%s' "
						"(heu, opt, hungarian, hybrid)\n", optarg);
				return 2;
			}
			break;
		case 'a':
			errno = 0;
			hp.alpha = strtod(optarg, &end);
			if (errno || *end || !(hp.alpha >= 0 && hp.alpha <= 1)) {
				fprintf(stderr, "esd-solve: --alpha '%s' is not a number in [0, 1]\n",
					optarg);
				return 2;
			}
			break;
		case 'r':
			errno = 0;
			repeat = strtol(optarg, &end, 10);
			repeat_given = 1;
			if (errno || *end || repeat < 1 || repeat > 1000000) {
				fprintf(stderr, "esd-solve: --repeat '%s' is not in 1..1000000\n",
					optarg);
				return 2;
			}
			break;
		case 'o':
			if (!strcmp(optarg, "row"))
				hp.heu_order = ESD_HEU_ROW_ORDER;
			else if (!strcmp(optarg, "regret"))
				hp.heu_order = ESD_HEU_REGRET_ORDER;
			else {
				fprintf(stderr, "esd-solve: --heu-order is row or regret\n");
				return 2;
			}
			break;
		case 'b':
			if (!strcmp(optarg, "ssp"))
				hp.backend = ESD_OPT_SSP;
			else if (!strcmp(optarg, "hungarian"))
				hp.backend = ESD_OPT_HUNGARIAN;
			else {
				fprintf(stderr, "esd-solve: --backend is ssp or hungarian\n");
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	fname = argv[optind];
	FILE *f = strcmp(fname, "-") ? fopen(fname, "rb") : stdin;
	if (!f) {
		fprintf(stderr, "esd-solve: %s: %s\n", fname, strerror(errno));
		return 2;
	}
	size_t len;
	char *text = read_all(f, &len);
	if (f != stdin)
		fclose(f);
	if (!text) {
		fprintf(stderr, "esd-solve: %s: cannot read\n", fname);
		return 2;
	}
	if (strlen(text) != len)
		die_line(1, "file contains a NUL byte");

	char err[256];
	const char *p = text;
	unsigned long line = 1;
	uint64_t hdr[3];
	const char *eol = strchr(p, '\n');
	p = skip_ws(p);
	for (int q = 0; q < 3; q++) {
		if (!*p || *p == '\n')
			die_line(line, "header must be 'k n m' (three non-negative integers), found %d",
				 q);
		if (parse_u64(&p, UINT32_MAX, &hdr[q], err, sizeof(err)))
			die_line(line, "header: %s", err);
		p = skip_ws(p);
	}
	if (*p && *p != '\n')
		die_line(line, "header must be 'k n m': unexpected '%.*s'",
			 (int)((eol ? eol : p + strlen(p)) - p), p);
	uint64_t k = hdr[0], n = hdr[1], m = hdr[2];
	if (n < 1 || n > ESD_MAX_WORKERS)
		die_line(line, "n = %llu workers: must be 1..%d", (unsigned long long)n,
			 ESD_MAX_WORKERS);
	if (k != m * n)
		die_line(line, "k = %llu but m * n = %llu * %llu = %llu", (unsigned long long)k,
			 (unsigned long long)m, (unsigned long long)n, (unsigned long long)(m * n));
	if (k > ESD_SOLVE_MAX_K)
		die_line(line, "k = %llu rows: at most %u", (unsigned long long)k, ESD_SOLVE_MAX_K);
	int64_t *cost = malloc((k ? k : 1) * n * sizeof(int64_t));
	uint32_t *assign = malloc((k ? k : 1) * sizeof(uint32_t));
	if (!cost || !assign) {
		fprintf(stderr, "esd-solve: out of memory for k = %llu\n", (unsigned long long)k);
		return 2;
	}
	if (*p == '\n')
		p++;
	for (uint64_t i = 0; i < k; i++) {
		line++;
		if (!*p)
			die_line(line, "file ends after %llu of %llu rows", (unsigned long long)i,
				 (unsigned long long)k);
		uint64_t got = 0;
		p = skip_ws(p);
		while (*p && *p != '\n') {
			uint64_t v;
			if (got == n)
				die_line(line, "row %llu: expected %llu values, found more",
					 (unsigned long long)i, (unsigned long long)n);
			if (parse_u64(&p, (uint64_t)ESD_COST_MAX, &v, err, sizeof(err)))
				die_line(line, "row %llu, column %llu: %s", (unsigned long long)i,
					 (unsigned long long)got, err);
			cost[i * n + got++] = (int64_t)v;
			p = skip_ws(p);
		}
		if (got != n)
			die_line(line, "row %llu: expected %llu values, found %llu",
				 (unsigned long long)i, (unsigned long long)n,
				 (unsigned long long)got);
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
			die_line(line + 1, "unexpected data after the %llu rows", (unsigned long long)k);
		p = q;
	}
	free(text);

	struct esd_solver *s;
	if (esd_solver_create(&s)) {
		fprintf(stderr, "esd-solve: out of memory\n");
		return 2;
	}
	int64_t *us = malloc((size_t)repeat * sizeof(int64_t));
	if (!us)
		return 2;
	int rc = 0;
	for (long r = 0; r < repeat; r++) {
		int64_t t0 = esd_now_ns();
		switch (method) {
		case ESD_METHOD_HEU:
			rc = esd_solve_heu(s, cost, (uint32_t)k, (uint32_t)n, NULL, hp.heu_order,
					   assign);
			break;
		case ESD_METHOD_HUNGARIAN:
			rc = esd_solve_hungarian(s, cost, (uint32_t)k, (uint32_t)n, NULL, assign);
			break;
		case ESD_METHOD_HYBRID:
			rc = esd_solve_hybrid(s, cost, (uint32_t)k, (uint32_t)n, NULL, &hp, assign);
			break;
		default:
			rc = esd_solve_opt(s, cost, (uint32_t)k, (uint32_t)n, NULL, assign);
			break;
		}
		us[r] = (esd_now_ns() - t0) / 1000;
		if (rc) {
			fprintf(stderr, "esd-solve: %s failed: %s\n", esd_method_name(method),
				esd_strerror(rc));
			return 1;
		}
	}
	printf("cost %lld\n", (long long)esd_assign_cost(cost, (uint32_t)k, (uint32_t)n, assign));
	for (uint64_t i = 0; i < k; i++)
		printf("%u\n", assign[i]);
	if (repeat_given) {
		qsort(us, (size_t)repeat, sizeof(int64_t), cmp_i64);
		fprintf(stderr, "solve_us %lld\n", (long long)us[repeat / 2]);
	}
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "esd-solve: write error\n");
		return 1;
	}
	free(us);
	free(cost);
	free(assign);
	esd_solver_free(s);
	return 0;
}
