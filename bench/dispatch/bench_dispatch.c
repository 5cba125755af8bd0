/*
 * bench_dispatch: the decision engine's speed on Criteo-shaped batches,
 * n = 8 workers, m = 32..1024 samples per worker (k = 256..8192), beside
 * the ESD paper's Table 2.
 *
 * Batches: 26 tables with Criteo Kaggle's cardinalities (docs/dataset.md), one
 * key per table per sample, ids drawn from a power law (exponent --skew)
 * with a seeded generator. Snapshots of 8 LRU caches (--cache-rows each)
 * are warmed up by --warmup dispatch steps (hybrid 0.25, on-demand sync),
 * then --reps successive steps give the cost matrices every solver is
 * timed on (the same matrices for every solver, so ratios compare like
 * with like). opt's warm start comes from the previous step's matrix, as
 * in a run; "opt cold" has it off. Hungarian runs while the previous size
 * took under --hungarian-limit seconds / 8 (O(k^3)); scipy's
 * linear_sum_assignment runs on the expanded k x k matrix through
 * /usr/bin/python3 under the same rule. Every time is a median.
 */
#include <esd/clock.h>
#include <esd/dispatch_snap.h>

#include "criteo_batch.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Table 2 of the ESD paper, ms, m = 32..1024, n = 8. */
static const double paper_serial_ms[6] = {9, 62, 528, 3360, 50976, 134986};
static const double paper_gpu_ms[6] = {21, 28, 82, 186, 811, 1385};

static void fmt_ms(char *buf, size_t len, double ms)
{
	if (ms < 0)
		snprintf(buf, len, "-");
	else if (ms < 1)
		snprintf(buf, len, "%.3f", ms);
	else if (ms < 100)
		snprintf(buf, len, "%.2f", ms);
	else
		snprintf(buf, len, "%.0f", ms);
}

/* scipy on the expanded matrix; returns ms or -1, and the cost. */
static double scipy_ms(const int64_t *c, uint32_t k, uint32_t n, int reps, int64_t *cost)
{
	if (access("/usr/bin/python3", X_OK))
		return -1;
	char path[] = "/tmp/esd-bench-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	size_t bytes = (size_t)k * n * sizeof(int64_t);
	if (write(fd, c, bytes) != (ssize_t)bytes) {
		close(fd);
		unlink(path);
		return -1;
	}
	close(fd);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 %s %s %u %u %d 2>/dev/null",
	         ESD_BENCH_SCIPY_SCRIPT, path, k, n, reps);
	FILE *p = popen(cmd, "r");
	double ms = -1;
	long long tc = -1;
	if (p) {
		if (fscanf(p, "ms %lf cost %lld", &ms, &tc) != 2)
			ms = -1;
		pclose(p);
	}
	unlink(path);
	*cost = tc;
	return ms;
}

int main(int argc, char **argv)
{
	uint32_t n = 8, cache_rows = 1u << 18;
	int reps = 15, warmup = 30, do_hung = 1, do_scipy = 1;
	double skew = 1.3, hung_limit = 60;
	uint32_t mlist[16] = {32, 64, 128, 256, 512, 1024};
	int nm = 6;
	static const struct option opts[] = {{"m", required_argument, 0, 'm'},
	                                     {"reps", required_argument, 0, 'r'},
	                                     {"warmup", required_argument, 0, 'w'},
	                                     {"skew", required_argument, 0, 's'},
	                                     {"cache-rows", required_argument, 0, 'c'},
	                                     {"hungarian-limit", required_argument, 0, 'H'},
	                                     {"no-hungarian", no_argument, 0, 'N'},
	                                     {"no-scipy", no_argument, 0, 'S'},
	                                     {0, 0, 0, 0}};
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'm': {
			nm = 0;
			for (char *tok = strtok(optarg, ","); tok && nm < 16;
			     tok = strtok(NULL, ","))
				mlist[nm++] = (uint32_t)atoi(tok);
			break;
		}
		case 'r':
			reps = atoi(optarg);
			break;
		case 'w':
			warmup = atoi(optarg);
			break;
		case 's':
			skew = atof(optarg);
			break;
		case 'c':
			cache_rows = (uint32_t)atoi(optarg);
			break;
		case 'H':
			hung_limit = atof(optarg);
			break;
		case 'N':
			do_hung = 0;
			break;
		case 'S':
			do_scipy = 0;
			break;
		default:
			fprintf(stderr, "usage: bench_dispatch [--m 32,64,...] [--reps R] "
			                "[--warmup W] [--skew S] [--cache-rows C]\n"
			                "       [--hungarian-limit SEC] [--no-hungarian] "
			                "[--no-scipy]\n");
			return 2;
		}
	}
	if (reps < 3)
		reps = 3;
	printf("# bench_dispatch: n = %u, Criteo-shaped batches (26 keys/sample, skew %.2f), "
	       "LRU caches of %u rows, warmup %d steps, %d reps, medians\n\n",
	       n, skew, cache_rows, warmup, reps);

	const int64_t T[8] = {3277, 3277, 3277, 3277, 32768, 32768, 32768, 32768};
	/* ns per 512-float row + Adagrad state (4 KiB) at 5 and 0.5 Gbit/s... scaled:
	 * 2048 B at 5 Gbit/s = 3277 ns, at 0.5 Gbit/s = 32768 ns */
	static const double alphas[5] = {1, 0.5, 0.25, 0.125, 0};

	printf("| m | k | uniq keys | cost matrix ms (keytab+fill+matrix) | heu ms | opt ms | "
	       "opt cold ms | opt moves / searches | hybrid 1 / .5 / .25 / .125 / 0 ms | hungarian "
	       "ms | "
	       "scipy ms | paper serial ms | paper GPU ms | decision hybrid(.25) ms | whole step "
	       "hybrid(.25) ms | "
	       "whole step opt ms | heu gap %% | hybrid .25 gap %% |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	double prev_hung_s = 0, prev_scipy_s = 0;
	for (int mi = 0; mi < nm; mi++) {
		const uint32_t m = mlist[mi], k = m * n;
		uint64_t rng = UINT64_C(0x5eed) + m;
		uint32_t capc[8];
		for (uint32_t j = 0; j < n; j++)
			capc[j] = cache_rows;
		struct esd_snapset *ss;
		if (esd_snapset_create(n, capc, ESD_POLICY_LRU, &ss)) {
			fprintf(stderr, "snapset: out of memory\n");
			return 1;
		}
		struct esd_dispatcher_config cfg = {
		    .n = n,
		    .T = T,
		    .method = ESD_METHOD_HYBRID,
		    .hybrid = {0.25, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER},
		    .seed = 1,
		    .sync = ESD_SYNC_ON_DEMAND};
		struct esd_dispatcher *d;
		if (esd_dispatcher_create(&cfg, ss, &d))
			return 1;
		uint32_t *off = malloc((k + 1) * sizeof(uint32_t));
		esd_key_t *keys = malloc((size_t)k * 26 * sizeof(esd_key_t));
		uint32_t *assign = malloc(k * sizeof(uint32_t));
		int64_t *mats = malloc((size_t)reps * k * n * sizeof(int64_t));
		int64_t *ns = malloc((size_t)(reps + 1) * sizeof(int64_t));
		int64_t *ns2 = malloc((size_t)(reps + 1) * sizeof(int64_t));
		int64_t *ns3 = malloc((size_t)(reps + 1) * sizeof(int64_t));
		int64_t *ns4 = malloc((size_t)(reps + 1) * sizeof(int64_t));
		if (!off || !keys || !assign || !mats || !ns || !ns2 || !ns3 || !ns4)
			return 1;
		int64_t *ph[5];
		for (int q = 0; q < 5; q++)
			if (!(ph[q] = malloc((size_t)reps * sizeof(int64_t))))
				return 1;
		struct esd_batch b = {k, off, keys};
		for (int w = 0; w < warmup; w++) {
			gen_batch(&rng, skew, 1, k, off, keys);
			if (esd_dispatcher_step(d, &b, assign, NULL))
				return 1;
		}
		/* whole step, hybrid(0.25): reps successive iterations; keep the
		 * cost matrices for the solver timings */
		uint32_t uniq = 0;
		for (int r = 0; r < reps; r++) {
			gen_batch(&rng, skew, 1, k, off, keys);
			int rc = esd_dispatcher_step(d, &b, assign, NULL);
			if (rc) {
				fprintf(stderr, "step: %s\n", strerror(-rc));
				return 1;
			}
			const struct esd_dispatch_counters *ct = esd_dispatcher_counters(d);
			ns[r] = ct->last.total;
			ns2[r] = ct->last.keytab + ct->last.fill + ct->last.matrix;
			ph[0][r] = ct->last.keytab;
			ph[1][r] = ct->last.fill;
			ph[2][r] = ct->last.matrix;
			ph[3][r] = ct->last.solve;
			ph[4][r] = ct->last.advance;
			ns3[r] = ct->last.total - ct->last.advance;
			uniq = ct->unique_keys;
			memcpy(mats + (size_t)r * k * n, esd_dispatcher_costmat(d),
			       (size_t)k * n * sizeof(int64_t));
		}
		double step_hyb = median_ms(ns, reps), build = median_ms(ns2, reps);
		double decision = median_ms(ns3, reps);
		fprintf(stderr,
		        "m=%u whole step hybrid(.25), medians (ms): keytab %.3f fill %.3f "
		        "matrix %.3f solve %.3f advance %.3f\n",
		        m, median_ms(ph[0], reps), median_ms(ph[1], reps), median_ms(ph[2], reps),
		        median_ms(ph[3], reps), median_ms(ph[4], reps));
		esd_dispatcher_free(d);
		/* whole step with opt, same snapshots continuing */
		cfg.method = ESD_METHOD_OPT;
		if (esd_dispatcher_create(&cfg, ss, &d))
			return 1;
		for (int r = 0; r < reps; r++) {
			gen_batch(&rng, skew, 1, k, off, keys);
			if (esd_dispatcher_step(d, &b, assign, NULL))
				return 1;
			ns[r] = esd_dispatcher_counters(d)->last.total;
		}
		double step_opt = median_ms(ns, reps);
		esd_dispatcher_free(d);
		esd_snapset_free(ss);

		/* solvers on the kept matrices */
		struct esd_solver *s;
		if (esd_solver_create(&s))
			return 1;
		double heu_gap = 0, hyb_gap = 0;
		uint64_t augm = 0, dijk = 0;
		for (int r = 0; r < reps; r++) {
			const int64_t *c = mats + (size_t)r * k * n;
			int64_t t0 = esd_now_ns();
			esd_solve_heu(s, c, k, n, NULL, ESD_HEU_ROW_ORDER, assign);
			ns[r] = esd_now_ns() - t0;
			int64_t heu_cost = esd_assign_cost(c, k, n, assign);
			t0 = esd_now_ns();
			esd_solve_opt(s, c, k, n, NULL, assign); /* warm from matrix r-1 */
			ns2[r] = esd_now_ns() - t0;
			augm += esd_solver_stats(s)->augmentations;
			dijk += esd_solver_stats(s)->dijkstras;
			int64_t opt_cost = esd_assign_cost(c, k, n, assign);
			heu_gap +=
			    opt_cost ? 100.0 * (double)(heu_cost - opt_cost) / (double)opt_cost : 0;
			struct esd_hybrid_params hp = {0.25, ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
			esd_solve_hybrid(s, c, k, n, NULL, &hp, assign);
			int64_t hc = esd_assign_cost(c, k, n, assign);
			hyb_gap +=
			    opt_cost ? 100.0 * (double)(hc - opt_cost) / (double)opt_cost : 0;
		}
		double heu_ms = median_ms(ns, reps), opt_ms = median_ms(ns2, reps);
		esd_solver_set_warm(s, 0);
		for (int r = 0; r < reps; r++) {
			const int64_t *c = mats + (size_t)r * k * n;
			int64_t t0 = esd_now_ns();
			esd_solve_opt(s, c, k, n, NULL, assign);
			ns[r] = esd_now_ns() - t0;
		}
		double opt_cold = median_ms(ns, reps);
		esd_solver_set_warm(s, 1);
		double hyb[5];
		for (int a = 0; a < 5; a++) {
			struct esd_hybrid_params hp = {alphas[a], ESD_EXACT_SSP, ESD_HEU_ROW_ORDER};
			for (int r = 0; r < reps; r++) {
				const int64_t *c = mats + (size_t)r * k * n;
				int64_t t0 = esd_now_ns();
				esd_solve_hybrid(s, c, k, n, NULL, &hp, assign);
				ns[r] = esd_now_ns() - t0;
			}
			hyb[a] = median_ms(ns, reps);
		}
		/* hungarian: O(k^3), stop before a size predicted above the limit */
		double hung = -1;
		int64_t opt_ref;
		esd_solve_opt(s, mats, k, n, NULL, assign);
		opt_ref = esd_assign_cost(mats, k, n, assign);
		if (do_hung && prev_hung_s * 8 < hung_limit) {
			int hr = prev_hung_s < 0.5 ? 3 : 1;
			for (int r = 0; r < hr; r++) {
				int64_t t0 = esd_now_ns();
				esd_solve_hungarian(s, mats, k, n, NULL, assign);
				ns[r] = esd_now_ns() - t0;
				if (esd_assign_cost(mats, k, n, assign) != opt_ref) {
					fprintf(stderr, "hungarian and opt disagree at k = %u\n",
					        k);
					return 1;
				}
			}
			hung = median_ms(ns, hr);
			prev_hung_s = hung / 1e3;
		}
		double sp = -1;
		if (do_scipy && prev_scipy_s * 8 < hung_limit) {
			int64_t sc;
			sp = scipy_ms(mats, k, n, prev_scipy_s < 0.5 ? 3 : 1, &sc);
			if (sp >= 0 && sc != opt_ref) {
				fprintf(stderr, "scipy cost %lld != opt %lld at k = %u\n",
				        (long long)sc, (long long)opt_ref, k);
				return 1;
			}
			prev_scipy_s = sp / 1e3;
		}
		esd_solver_free(s);
		char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], b7[32], hb[5][32], b8[32],
		    b9[32];
		fmt_ms(b1, 32, build);
		fmt_ms(b2, 32, heu_ms);
		fmt_ms(b3, 32, opt_ms);
		fmt_ms(b4, 32, opt_cold);
		fmt_ms(b5, 32, hung);
		fmt_ms(b6, 32, sp);
		fmt_ms(b7, 32, step_hyb);
		fmt_ms(b8, 32, step_opt);
		for (int a = 0; a < 5; a++)
			fmt_ms(hb[a], 32, hyb[a]);
		int pi = -1;
		for (int q = 0; q < 6; q++)
			if ((uint32_t)(32 << q) == m)
				pi = q;
		snprintf(b9, 32, "%s", pi >= 0 ? "" : "-");
		printf("| %u | %u | %u | %s | %s | %s | %s | %.0f / %.0f | %s / %s / %s / %s / %s "
		       "| %s | %s | "
		       "%s | %s | %.3f | %s | %s | %.2f | %.2f |\n",
		       m, k, uniq, b1, b2, b3, b4, (double)augm / reps, (double)dijk / reps, hb[0],
		       hb[1], hb[2], hb[3], hb[4], b5, b6,
		       pi >= 0 ? (snprintf(b9, 32, "%.0f", paper_serial_ms[pi]), b9) : "-",
		       pi >= 0 ? (snprintf(b9 + 16, 16, "%.0f", paper_gpu_ms[pi]), b9 + 16) : "-",
		       decision, b7, b8, heu_gap / reps, hyb_gap / reps);
		fflush(stdout);
		if (hung > 0)
			fprintf(stderr, "m=%u: opt is %.0fx faster than hungarian\n", m,
			        hung / opt_ms);
		if (sp > 0)
			fprintf(stderr, "m=%u: opt is %.0fx faster than scipy\n", m, sp / opt_ms);
		fprintf(stderr,
		        "m=%u: opt is %.0fx faster than the paper's serial Hungarian, %.0fx "
		        "than its GPU Hungarian (different machines)\n",
		        m, pi >= 0 ? paper_serial_ms[pi] / opt_ms : 0,
		        pi >= 0 ? paper_gpu_ms[pi] / opt_ms : 0);
		free(off);
		free(keys);
		free(assign);
		free(mats);
		free(ns);
		free(ns2);
		free(ns3);
		free(ns4);
		for (int q = 0; q < 5; q++)
			free(ph[q]);
	}
	return 0;
}
