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
#include "parse.h"

#include <esd/dispatch_solve.h>
#include <esd/clock.h>
#include <esd/err.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fname = "-";

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: esd-solve [--method heu|opt|hungarian|hybrid] [--alpha A] [--repeat R]\n"
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

/* Long: esd-solve's options, each checked with its own message, then one solve and its
 * output. */
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
	struct esd_hybrid_params hp = {0.25, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
	long repeat = 1;
	int repeat_given = 0;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'M':
			if (esd_method_parse(optarg, &method) || method == ESD_METHOD_LAIA ||
			    method == ESD_METHOD_VANILLA) {
				fprintf(stderr,
				        "esd-solve: unknown method '%s' "
				        "(heu, opt, hungarian, hybrid)\n",
				        optarg);
				return 2;
			}
			break;
		case 'a':
			errno = 0;
			hp.alpha = strtod(optarg, &end);
			if (errno || *end || !(hp.alpha >= 0 && hp.alpha <= 1)) {
				fprintf(stderr,
				        "esd-solve: --alpha '%s' is not a number in [0, 1]\n",
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
				hp.backend = ESD_EXACT_SSP;
			else if (!strcmp(optarg, "hungarian"))
				hp.backend = ESD_EXACT_HUNGARIAN;
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
	struct esd_solve_input in;
	char err[512];
	int prc = esd_solve_parse(text, len, &in, err, sizeof(err));
	free(text);
	if (prc) {
		fprintf(stderr, "esd-solve: %s:%s\n", fname, err);
		return 2;
	}
	const uint64_t k = in.k, n = in.n;
	int64_t *cost = in.cost;
	uint32_t *assign = malloc((k ? k : 1) * sizeof(uint32_t));
	if (!assign) {
		fprintf(stderr, "esd-solve: out of memory\n");
		return 2;
	}

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
