/*
 * bench_step: the whole dispatch step (esd_dispatcher_step) at one size,
 * repeated, with per-phase medians - the driver for instruction counts
 * (valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no
 * --toggle-collect=measured_steps) and for quick timings of one
 * configuration, e.g. the paper's step (hybrid 0.25 on the ESD matrix,
 * LRU) or the project's default (opt on the shared-charge matrix with
 * local search, unequal sizes, emark; docs/quality.md).
 *
 * Batches are Criteo-shaped as in bench_dispatch (criteo_batch.h: 26 tables with Criteo
 * Kaggle's cardinalities, power-law ids, seeded) and generated before the
 * measured steps, so the measured function runs nothing but steps.
 *
 * The warmup runs steps until every snapshot is full, then 50 more (the
 * default, --warmup full): the steady state of a run, where nearly every
 * miss evicts a row and the snapshots' lines are spread over all of their
 * memory. A short warmup (--warmup 30) measures snapshots a few per cent
 * full, which is quicker and flatters the step (bench/results/dispatch.md
 * has both); the last line says how full they were.
 *
 * --vs-laia: LAIA with equal sizes (the paper baseline, laia@equal) runs
 * beside the configured method on the same batches, each with snapshots
 * of its own, their steps alternating (warmup and measured), and the
 * last line gives both CPU medians and their ratio: the decision's price
 * against LAIA's own step, measured in the same run.
 *
 * --vs-policy P: the configured method again beside itself, with
 * snapshots under cache policy P (e.g. Emark against LRU), the same
 * alternating steps and the same last line: the policy's price in the
 * whole step.
 */
#include <esd/clock.h>
#include <esd/dispatch_snap.h>

#include "criteo_batch.h"

/* Under valgrind (--instr-atstart=no) only the measured steps run
 * instrumented: the warmup to full snapshots then runs at valgrind's
 * plain speed, so callgrind can count the steps of full-size caches. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

struct run {
	struct esd_dispatcher *d;
	struct esd_batch *b;
	uint32_t *assign;
	int steps;
	struct esd_snapset *ss;
	int64_t *ph[14]; /* keytab fill matrix solve advance total cpu, the
	                  * advance's plan caches directory outdated, and the
	                  * solve's method, canonical pass, local search */
	int64_t cost;
};

/* LAIA with equal sizes beside the measured method (--vs-laia), or the
 * method under another policy (--vs-policy): its own dispatcher and
 * snapshots, the whole step's CPU per step. */
struct base_run {
	struct esd_dispatcher *d;
	struct esd_snapset *ss;
	uint32_t *assign;
	int64_t *cpu;
	int64_t cost;
};

/* One step of the baseline, if there is one, timed into cpu[s]. */
static int base_step(struct base_run *lb, const struct esd_batch *b, int s)
{
	if (!lb->d)
		return 0;
	int64_t c0 = cpu_ns();
	int rc = esd_dispatcher_step(lb->d, b, lb->assign, NULL);
	int64_t c1 = cpu_ns();
	if (rc)
		return rc;
	if (s >= 0) {
		lb->cpu[s] = c1 - c0;
		lb->cost += esd_dispatcher_counters(lb->d)->true_cost;
	}
	return 0;
}

__attribute__((noinline)) static int measured_steps(struct run *r, struct base_run *lb)
{
	for (int s = 0; s < r->steps; s++) {
		int64_t c0 = cpu_ns();
		int rc = esd_dispatcher_step(r->d, &r->b[s], r->assign, NULL);
		int64_t c1 = cpu_ns();
		if (rc || (rc = base_step(lb, &r->b[s], s)))
			return rc;
		const struct esd_dispatch_counters *ct = esd_dispatcher_counters(r->d);
		r->ph[0][s] = ct->last.keytab;
		r->ph[1][s] = ct->last.fill;
		r->ph[2][s] = ct->last.matrix;
		r->ph[3][s] = ct->last.solve;
		r->ph[4][s] = ct->last.advance;
		r->ph[5][s] = ct->last.total;
		r->ph[6][s] = c1 - c0;
		const struct esd_advance_times *at = esd_snapset_advance_times(r->ss);
		r->ph[7][s] = at->plan;
		r->ph[8][s] = at->caches;
		r->ph[9][s] = at->directory;
		r->ph[10][s] = at->outdated;
		r->ph[11][s] = ct->solve.total_ns;
		r->ph[12][s] = ct->solve.canon_ns;
		r->ph[13][s] = ct->ls.ns;
		r->cost += ct->true_cost;
	}
	return 0;
}

/* --vs-laia's line: both steps' CPU medians (the measured method's in
 * r->ph[6]: median_ms sorted it in place, the same values) and the ratio. */
static void print_vs_laia(struct run *r, struct base_run *lb, const char *name)
{
	const double me = median_ms(r->ph[6], r->steps), base = median_ms(lb->cpu, r->steps);
	printf("vs %s: cpu %.3f against %.3f ms (medians, same batches, alternating "
	       "steps): %.2fx; true cost sum %lld against %lld (%.3f)\n",
	       name, me, base, base > 0 ? me / base : 0.0, (long long)r->cost, (long long)lb->cost,
	       lb->cost ? (double)r->cost / (double)lb->cost : 0.0);
}

int main(int argc, char **argv)
{
	uint32_t n = 8, m = 128, cache_rows = 1u << 18;
	uint32_t capf = 0, caps = 0;
	int steps = 50, warmup = -1, shared = 0, vs_laia = 0; /* -1: until full */
	int vs_pol = -1; /* --vs-policy: the baseline's policy */
	uint64_t ls = 0, scale = 1;
	double skew = 1.3, alpha = 0.25;
	enum esd_method method = ESD_METHOD_HYBRID;
	enum esd_policy pol = ESD_POLICY_LRU;
	static const struct option opts[] = {
	    {"n", required_argument, 0, 'n'},          {"m", required_argument, 0, 'm'},
	    {"steps", required_argument, 0, 'r'},      {"warmup", required_argument, 0, 'w'},
	    {"skew", required_argument, 0, 's'},       {"scale", required_argument, 0, 'S'},
	    {"cache-rows", required_argument, 0, 'c'}, {"method", required_argument, 0, 'M'},
	    {"alpha", required_argument, 0, 'a'},      {"shared", no_argument, 0, 'x'},
	    {"ls", required_argument, 0, 'l'},         {"sizes", required_argument, 0, 'z'},
	    {"policy", required_argument, 0, 'p'},     {"vs-laia", no_argument, 0, 'L'},
	    {"vs-policy", required_argument, 0, 'P'},  {0, 0, 0, 0}};
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			n = (uint32_t)atoi(optarg);
			if (n < 2 || n > ESD_MAX_WORKERS || n % 2) {
				fprintf(stderr, "--n: an even number of workers, 2..%d\n",
				        ESD_MAX_WORKERS);
				return 2;
			}
			break;
		case 'm':
			m = (uint32_t)atoi(optarg);
			break;
		case 'r':
			steps = atoi(optarg);
			break;
		case 'w':
			warmup = strcmp(optarg, "full") ? atoi(optarg) : -1;
			break;
		case 's':
			skew = atof(optarg);
			break;
		case 'S':
			scale = (uint64_t)atoll(optarg);
			break;
		case 'c':
			cache_rows = (uint32_t)atoi(optarg);
			break;
		case 'M':
			if (esd_method_parse(optarg, &method)) {
				fprintf(stderr, "bad method %s\n", optarg);
				return 2;
			}
			break;
		case 'a':
			alpha = atof(optarg);
			break;
		case 'x':
			shared = 1;
			break;
		case 'l':
			ls = (uint64_t)atoll(optarg);
			break;
		case 'z':
			if (sscanf(optarg, "%u/%u", &capf, &caps) != 2) {
				fprintf(stderr, "--sizes FAST/SLOW\n");
				return 2;
			}
			break;
		case 'p':
			if (esd_policy_parse(optarg, &pol)) {
				fprintf(stderr, "bad policy %s\n", optarg);
				return 2;
			}
			break;
		case 'L':
			vs_laia = 1;
			break;
		case 'P': {
			enum esd_policy vp;
			if (esd_policy_parse(optarg, &vp)) {
				fprintf(stderr, "bad policy %s\n", optarg);
				return 2;
			}
			vs_pol = (int)vp;
			break;
		}
		default:
			fprintf(stderr,
			        "usage: bench_step [--n N] [--m M] [--steps S] [--warmup W|full] "
			        "[--skew X] [--scale D] [--cache-rows C]\n"
			        "       [--method hybrid|opt|heu|laia|...] [--alpha A] [--shared] "
			        "[--ls N] [--sizes F/S]\n"
			        "       [--policy lru|emark|...] [--vs-laia | --vs-policy P]\n");
			return 2;
		}
	}
	if (steps < 1)
		steps = 1;
	const uint32_t k = m * n;
	/* half the workers on fast links (5 Gbit/s), half on slow (0.5) */
	uint32_t cap[ESD_MAX_WORKERS];
	int64_t T[ESD_MAX_WORKERS];
	for (uint32_t j = 0; j < n; j++)
		T[j] = j < n / 2 ? 3277 : 32768;
	if (capf + caps) {
		if (n / 2 * (capf + caps) != k) {
			fprintf(stderr, "--sizes: n/2 x (F + S) must be k = %u\n", k);
			return 2;
		}
		for (uint32_t j = 0; j < n; j++)
			cap[j] = j < n / 2 ? capf : caps;
	}
	uint32_t capc[ESD_MAX_WORKERS];
	for (uint32_t j = 0; j < n; j++)
		capc[j] = cache_rows;
	struct esd_snapset *ss;
	if (esd_snapset_create(n, capc, pol, &ss))
		return 1;
	struct esd_dispatcher_config cfg = {.n = n,
	                                    .cap = capf + caps ? cap : NULL,
	                                    .T = T,
	                                    .method = method,
	                                    .hybrid = {alpha, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER},
	                                    .seed = 1,
	                                    .sync = ESD_SYNC_ON_DEMAND,
	                                    .matrix = shared ? ESD_MATRIX_SHARED : ESD_MATRIX_PAPER,
	                                    .ls_evals = ls};
	struct run r = {.steps = steps, .ss = ss};
	if (esd_dispatcher_create(&cfg, ss, &r.d))
		return 1;
	if (vs_laia && vs_pol >= 0) {
		fprintf(stderr, "--vs-laia and --vs-policy: one baseline at a time\n");
		return 2;
	}
	struct base_run lb = {0};
	if (vs_pol >= 0) {
		if (esd_snapset_create(n, capc, (enum esd_policy)vs_pol, &lb.ss) ||
		    esd_dispatcher_create(&cfg, lb.ss, &lb.d) ||
		    !(lb.assign = malloc(k * sizeof(uint32_t))) ||
		    !(lb.cpu = malloc((size_t)steps * sizeof(int64_t))))
			return 1;
	}
	if (vs_laia) {
		struct esd_dispatcher_config lc = {.n = n,
		                                   .T = T,
		                                   .method = ESD_METHOD_LAIA,
		                                   .seed = 1,
		                                   .sync = ESD_SYNC_ON_DEMAND};
		if (esd_snapset_create(n, capc, pol, &lb.ss) ||
		    esd_dispatcher_create(&lc, lb.ss, &lb.d) ||
		    !(lb.assign = malloc(k * sizeof(uint32_t))) ||
		    !(lb.cpu = malloc((size_t)steps * sizeof(int64_t))))
			return 1;
	}
	/* the warmup's batches one at a time (a long warmup fills the
	 * snapshots: the steady state evicts a row for nearly every miss);
	 * the measured ones made beforehand, so that nothing else runs
	 * between their steps */
	r.b = calloc((size_t)steps + 1, sizeof(*r.b));
	r.assign = malloc(k * sizeof(uint32_t));
	if (!r.b || !r.assign)
		return 1;
	uint64_t rng = UINT64_C(0x5eed) + m;
	for (int s = 0; s <= steps; s++) {
		uint32_t *off = malloc((k + 1) * sizeof(uint32_t));
		esd_key_t *keys = malloc((size_t)k * 26 * sizeof(esd_key_t));
		if (!off || !keys)
			return 1;
		r.b[s] = (struct esd_batch){k, off, keys};
	}
	for (int q = 0; q < 14; q++)
		if (!(r.ph[q] = malloc((size_t)steps * sizeof(int64_t))))
			return 1;
	/* --warmup full: until every snapshot is full, then 50 steps more
	 * (at most 100,000: a key space smaller than the caches never fills
	 * them) */
	int full_at = -1, done = 0;
	for (; warmup < 0 ? (full_at < 0 || done < full_at + 50) && done < 100000 : done < warmup;
	     done++) {
		gen_batch(&rng, skew, scale, k, (uint32_t *)r.b[steps].off,
		          (esd_key_t *)r.b[steps].keys);
		if (esd_dispatcher_step(r.d, &r.b[steps], r.assign, NULL) ||
		    base_step(&lb, &r.b[steps], -1))
			return 1;
		if (warmup < 0 && full_at < 0) {
			uint32_t j = 0;
			while (j < n && esd_snapset_count(ss, j) == capc[j])
				j++;
			if (j == n)
				full_at = done;
		}
	}
	for (int s = 0; s < steps; s++)
		gen_batch(&rng, skew, scale, k, (uint32_t *)r.b[s].off, (esd_key_t *)r.b[s].keys);
	CALLGRIND_START_INSTRUMENTATION;
	int rc = measured_steps(&r, &lb);
	CALLGRIND_STOP_INSTRUMENTATION;
	if (rc) {
		fprintf(stderr, "step: %s\n", strerror(-rc));
		return 1;
	}
	printf("k %u steps %d: keytab %.3f fill %.3f matrix %.3f solve %.3f advance %.3f "
	       "total %.3f cpu %.3f ms (medians); true cost sum %lld\n",
	       k, steps, median_ms(r.ph[0], steps), median_ms(r.ph[1], steps),
	       median_ms(r.ph[2], steps), median_ms(r.ph[3], steps), median_ms(r.ph[4], steps),
	       median_ms(r.ph[5], steps), median_ms(r.ph[6], steps), (long long)r.cost);
	printf("advance: plan %.3f caches %.3f directory %.3f outdated %.3f ms (medians)\n",
	       median_ms(r.ph[7], steps), median_ms(r.ph[8], steps), median_ms(r.ph[9], steps),
	       median_ms(r.ph[10], steps));
	printf("solve: method %.3f (canonical pass %.3f) local search %.3f ms (medians)\n",
	       median_ms(r.ph[11], steps), median_ms(r.ph[12], steps), median_ms(r.ph[13], steps));
	/* (median_ms sorted the totals) */
	printf("total: p90 %.3f p99 %.3f max %.3f ms\n", (double)r.ph[5][steps * 9 / 10] / 1e6,
	       (double)r.ph[5][steps * 99 / 100] / 1e6, (double)r.ph[5][steps - 1] / 1e6);
	uint64_t held = 0, room = 0;
	for (uint32_t j = 0; j < n; j++) {
		held += esd_snapset_count(ss, j);
		room += capc[j];
	}
	printf("snapshots: %.1f %% full after %d steps", 100.0 * (double)held / (double)room,
	       done + steps);
	if (full_at >= 0)
		printf(" (full from step %d)", full_at + 1);
	printf("\n");
	if (vs_laia)
		print_vs_laia(&r, &lb, "laia@equal");
	if (vs_pol >= 0)
		print_vs_laia(&r, &lb, esd_policy_name((enum esd_policy)vs_pol));
	return 0;
}
