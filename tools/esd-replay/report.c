/*
 * esd-replay's report: a table for people, CSV for spreadsheets and JSON
 * for tests and scripts. Costs are link time in ms (sum of T_j, the
 * per-row transfer time over worker j's link); ratios are against the
 * first mechanism of the list.
 */
#include "replay.h"

#include <jansson.h>
#include <string.h>

static double ms(int64_t ns)
{
	return (double)ns / 1e6;
}

static void sizes_str(const struct replay_result *r, char *buf, size_t len)
{
	size_t o = 0;
	buf[0] = '\0';
	for (uint32_t w = 0; w < r->n && o + 1 < len; w++) {
		int c = snprintf(buf + o, len - o, "%s%u", w ? "/" : "", r->cap[w]);
		if (c < 0 || (size_t)c >= len - o)
			break;
		o += (size_t)c;
	}
}

static double hit_ratio(const struct replay_result *r)
{
	return r->needs ? (double)r->hits / (double)r->needs : 0.0;
}

void replay_print_table(const struct replay_env *env, const struct replay_result *r, int nr,
                        FILE *f)
{
	const struct esd_job *j = &env->job;
	fprintf(f,
	        "# %s: %s, n=%u, k=%llu, %llu iterations, dim %u, cache %.3f (%llu rows), "
	        "compute %llu ns/sample\n",
	        env->config, env->stream, j->n, (unsigned long long)j->derived.global_batch,
	        (unsigned long long)env->iters, j->dim, j->cache_ratio,
	        (unsigned long long)(nr ? r[0].cache_rows : 0),
	        (unsigned long long)j->compute_ns_per_sample);
	fprintf(f, "# T_j (ns/row):");
	for (uint32_t w = 0; w < j->n; w++)
		fprintf(f, " %lld%s", (long long)env->T[w], env->fast[w] ? "" : "s");
	fprintf(f, "  (s: slow class)\n");
	fprintf(f, "%-18s %-24s %10s %6s %10s %6s %6s %9s %9s %9s %9s %9s %9s %7s %7s %7s\n",
	        "mechanism", "sizes", "cost_ms", "x_base", "crit_ms", "base/x", "hit%", "value_ms",
	        "pull_ms", "evict_ms", "grad_ms", "fast_ms", "slow_ms", "dec_p50", "dec_max",
	        "cpu_p50");
	for (int i = 0; i < nr; i++) {
		char sz[256];
		sizes_str(&r[i], sz, sizeof(sz));
		fprintf(f,
		        "%-18s %-24s %10.1f %6.3f %10.1f %6.2f %6.1f %9.1f %9.1f %9.1f %9.1f %9.1f "
		        "%9.1f %7.3f %7.3f %7.3f\n",
		        r[i].name, sz, ms(r[i].true_cost),
		        r[0].true_cost ? (double)r[i].true_cost / (double)r[0].true_cost : 0.0,
		        ms(r[i].crit_ns),
		        r[i].crit_ns ? (double)r[0].crit_ns / (double)r[i].crit_ns : 0.0,
		        100 * hit_ratio(&r[i]), ms(r[i].kind_cost[ESD_CQ_UPDATE_VALUE]),
		        ms(r[i].kind_cost[ESD_CQ_MISS_PULL]), ms(r[i].kind_cost[ESD_CQ_EVICT_PUSH]),
		        ms(r[i].kind_cost[ESD_CQ_UPDATE_GRAD]), ms(r[i].class_cost[0]),
		        ms(r[i].class_cost[1]), r[i].decision_ms_p50, r[i].decision_ms_max,
		        r[i].decision_cpu_ms_p50);
	}
	for (int i = 0; i < nr; i++) {
		int64_t c = 0;
		for (int q = 0; q < ESD_CQ_KINDS; q++)
			c += r[i].alln_cost[q];
		fprintf(f, "# %s: rows every worker moved: %.1f pulls and %.1f gradient pushes per "
		        "iteration, %.1f %% of the true cost\n", r[i].name,
		        r[i].iters ? (double)r[i].alln_rows[ESD_CQ_MISS_PULL] / r[i].iters : 0.0,
		        r[i].iters ? (double)r[i].alln_rows[ESD_CQ_UPDATE_GRAD] / r[i].iters : 0.0,
		        r[i].true_cost ? 100.0 * (double)c / (double)r[i].true_cost : 0.0);
	}
	for (int i = 0; i < nr; i++) {
		if (r[i].job[0])
			fprintf(f, "# %s: %s\n", r[i].name, r[i].job);
		if (r[i].job[0] && j->derived.split_fit)
			fprintf(f, "# %s: %llu refits; the last model %.9g,%.9g\n", r[i].name,
			        (unsigned long long)r[i].refits, r[i].size_model[0],
			        r[i].size_model[1]);
		else if (r[i].size_model[0] > 0 || r[i].size_model[1] > 0)
			fprintf(f,
			        "# %s: sizes from workers.split = link-aware, "
			        "workers.size_model = %.9g,%.9g\n",
			        r[i].name, r[i].size_model[0], r[i].size_model[1]);
	}
}

void replay_print_csv(const struct replay_env *env, const struct replay_result *r, int nr, FILE *f)
{
	(void)env;
	fprintf(f, "mechanism,sizes,iterations,true_cost_ns,crit_ns,crit_xfer_ns,hit_ratio,"
	           "update_value_ns,miss_pull_ns,evict_push_ns,update_grad_ns,update_value,"
	           "miss_pull,evict_push,update_grad,fast_ns,slow_ns,decision_ms_mean,"
	           "decision_ms_p50,decision_ms_max,decision_cpu_ms_p50\n");
	for (int i = 0; i < nr; i++) {
		char sz[256];
		sizes_str(&r[i], sz, sizeof(sz));
		fprintf(f, "%s,%s,%llu,%lld,%lld,%lld,%.6f", r[i].name, sz,
		        (unsigned long long)r[i].iters, (long long)r[i].true_cost,
		        (long long)r[i].crit_ns, (long long)r[i].crit_xfer_ns, hit_ratio(&r[i]));
		for (int q = 0; q < ESD_CQ_KINDS; q++)
			fprintf(f, ",%lld", (long long)r[i].kind_cost[q]);
		for (int q = 0; q < ESD_CQ_KINDS; q++)
			fprintf(f, ",%llu", (unsigned long long)r[i].kind_count[q]);
		fprintf(f, ",%lld,%lld,%.4f,%.4f,%.4f,%.4f\n", (long long)r[i].class_cost[0],
		        (long long)r[i].class_cost[1], r[i].decision_ms_mean, r[i].decision_ms_p50,
		        r[i].decision_ms_max, r[i].decision_cpu_ms_p50);
	}
}

int replay_write_json(const struct replay_env *env, const struct replay_result *r, int nr,
                      const char *path)
{
	const struct esd_job *j = &env->job;
	json_t *root = json_pack("{s:s, s:s, s:i, s:I, s:I, s:i, s:f, s:I}", "config", env->config,
	                         "stream", env->stream, "workers", j->n, "global_batch",
	                         (json_int_t)j->derived.global_batch, "iterations", (json_int_t)env->iters,
	                         "dim", j->dim, "cache_ratio", j->cache_ratio,
	                         "compute_ns_per_sample", (json_int_t)j->compute_ns_per_sample);
	json_t *T = json_array(), *arr = json_array();
	for (uint32_t w = 0; w < j->n; w++)
		json_array_append_new(T, json_integer(env->T[w]));
	json_object_set_new(root, "T_ns", T);
	for (int i = 0; i < nr; i++) {
		json_t *m = json_pack(
		    "{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:f, s:f, s:f}", "mechanism",
		    r[i].name, "iterations", (json_int_t)r[i].iters, "cache_rows",
		    (json_int_t)r[i].cache_rows, "true_cost_ns", (json_int_t)r[i].true_cost,
		    "crit_ns", (json_int_t)r[i].crit_ns, "crit_xfer_ns",
		    (json_int_t)r[i].crit_xfer_ns, "hit_ratio", hit_ratio(&r[i]), "fast_ns",
		    (json_int_t)r[i].class_cost[0], "slow_ns", (json_int_t)r[i].class_cost[1],
		    "decision_ms_mean", r[i].decision_ms_mean, "decision_ms_p50",
		    r[i].decision_ms_p50, "decision_ms_max", r[i].decision_ms_max);
		json_t *sz = json_array(), *cnt = json_object(), *cost = json_object();
		for (uint32_t w = 0; w < r[i].n; w++)
			json_array_append_new(sz, json_integer(r[i].cap[w]));
		for (int q = 0; q < ESD_CQ_KINDS; q++) {
			const char *kn = esd_cq_kind_name((enum esd_cq_kind)q);
			json_object_set_new(cnt, kn, json_integer((json_int_t)r[i].kind_count[q]));
			json_object_set_new(cost, kn, json_integer((json_int_t)r[i].kind_cost[q]));
		}
		json_object_set_new(m, "sizes", sz);
		json_object_set_new(m, "transfers", cnt);
		json_object_set_new(m, "cost_ns", cost);
		json_object_set_new(m, "hits", json_integer((json_int_t)r[i].hits));
		json_object_set_new(m, "wire_bytes", json_integer((json_int_t)r[i].wire_bytes));
		json_object_set_new(m, "wire_ns", json_integer((json_int_t)r[i].wire_ns));
		json_object_set_new(m, "decision_cpu_ms_p50", json_real(r[i].decision_cpu_ms_p50));
		json_object_set_new(m, "ls_swaps", json_integer((json_int_t)r[i].ls_swaps));
		json_object_set_new(m, "ls_gain_ns", json_integer((json_int_t)r[i].ls_gain));
		json_t *alln = json_object();
		for (int q = 0; q < ESD_CQ_KINDS; q++)
			json_object_set_new(alln, esd_cq_kind_name((enum esd_cq_kind)q),
			                    json_pack("{s:I, s:I}", "rows",
			                              (json_int_t)r[i].alln_rows[q], "cost_ns",
			                              (json_int_t)r[i].alln_cost[q]));
		json_object_set_new(m, "every_worker", alln);
		if (r[i].job[0]) {
			json_object_set_new(m, "job", json_string(r[i].job));
			json_object_set_new(m, "refits", json_integer((json_int_t)r[i].refits));
		}
		if (r[i].size_model[0] > 0 || r[i].size_model[1] > 0)
			json_object_set_new(m, "size_model",
			                    json_pack("{s:f, s:f}", "fixed_rows",
			                              r[i].size_model[0], "rows_per_sample",
			                              r[i].size_model[1]));
		json_array_append_new(arr, m);
	}
	json_object_set_new(root, "mechanisms", arr);
	int rc = !strcmp(path, "-") ? json_dumpf(root, stdout, JSON_INDENT(2))
	                            : json_dump_file(root, path, JSON_INDENT(2));
	if (!strcmp(path, "-"))
		fputc('\n', stdout);
	json_decref(root);
	if (rc) {
		fprintf(stderr, "esd-replay: cannot write %s\n", path);
		return -1;
	}
	return 0;
}
