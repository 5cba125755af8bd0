/*
 * esdctl metrics: the state of every target in the Prometheus text
 * exposition format (version 0.0.4). Samples are grouped by family, each
 * family once with its HELP and TYPE lines, as the format requires; a
 * target that does not answer is reported by esd_up 0 and nothing else.
 * Counters are the daemons' cumulative counters (they restart at 0 with
 * the daemon); gauges are instantaneous values. Names follow Prometheus'
 * naming rules, which `promtool check metrics` enforces: a base unit
 * (seconds, bytes) or a counted thing (rows) as the last word, then _total
 * on counters and on nothing else; values are converted to that unit.
 */
#include "esdctl.h"

#include <esd/types.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum fam_id {
	F_UP,
	F_NODE_ITER,
	F_NODE_ITERS,
	F_NODE_IPS,
	F_NODE_LOSS,
	F_NODE_TRAINER,
	F_NODE_DEATHS,
	F_NODE_CPU,
	F_LINK_RATE,
	F_LINK_TX_BYTES,
	F_LINK_TX_ROWS,
	F_LINK_RX_BYTES,
	F_LINK_RX_ROWS,
	F_LINK_WIRE,
	F_LINK_WAIT,
	F_CACHE_BYTES,
	F_CACHE_CAP,
	F_CACHE_USED,
	F_CACHE_RATIO,
	F_CACHE_HITS,
	F_CACHE_MISSES,
	F_CACHE_EVICT,
	F_DISP_STEPS,
	F_DISP_MEAN,
	F_DISP_LAST,
	F_DISP_SOLVE,
	F_DISP_REGRET_MED,
	F_DISP_REGRET_MAX,
	F_DISP_XFERS,
	F_DISP_EST,
	F_DISP_TRUE,
	F_DISP_GAP,
	F_PS_ITER,
	F_PS_CONN,
	F_PS_ROWS,
	F_PS_BARRIERS,
	F_PS_PULLED,
	F_PS_VALUE,
	F_PS_GRAD,
	F_PS_CKPT,
	F_PS_FAILED,
	F_PS_CPU,
	F_N
};

struct fam {
	const char *name, *type, *help;
};

static const struct fam fams[F_N] = {
    [F_UP] = {"esd_up", "gauge", "1 if the control socket answered this scrape, else 0"},
    [F_NODE_ITER] = {"esd_node_iteration", "gauge", "Last iteration the node completed"},
    [F_NODE_ITERS] = {"esd_node_iterations", "gauge", "Iterations the job runs"},
    [F_NODE_IPS] = {"esd_node_iterations_per_second", "gauge",
                    "Iterations per second since the node started"},
    [F_NODE_LOSS] = {"esd_node_loss", "gauge", "Training loss of the last micro-batch"},
    [F_NODE_TRAINER] = {"esd_node_trainer_attached", "gauge", "1 if a trainer is attached"},
    [F_NODE_DEATHS] = {"esd_node_trainer_deaths_total", "counter",
                       "Trainers that died during an iteration"},
    [F_LINK_RATE] = {"esd_link_rate_bytes_per_second", "gauge",
                     "Shaping rate of the link in bytes per second (0: unshaped)"},
    [F_LINK_TX_BYTES] = {"esd_link_tx_bytes_total", "counter",
                         "Row bytes sent on the link, by transfer kind"},
    [F_LINK_TX_ROWS] = {"esd_link_tx_rows_total", "counter",
                        "Rows sent on the link, by transfer kind"},
    [F_LINK_RX_BYTES] = {"esd_link_rx_bytes_total", "counter",
                         "Row bytes received on the link, by transfer kind"},
    [F_LINK_RX_ROWS] = {"esd_link_rx_rows_total", "counter",
                        "Rows received on the link, by transfer kind"},
    [F_LINK_WIRE] = {"esd_link_wire_tx_bytes_total", "counter",
                     "All bytes handed to the link's backend"},
    [F_LINK_WAIT] = {"esd_link_shaped_wait_seconds_total", "counter",
                     "Time spent waiting for the link's token bucket"},
    [F_CACHE_BYTES] = {"esd_cache_bytes", "gauge", "Bytes of the node's cache region"},
    [F_CACHE_CAP] = {"esd_cache_capacity_rows", "gauge", "Rows the cache holds at most"},
    [F_CACHE_USED] = {"esd_cache_used_rows", "gauge", "Occupied cache slots"},
    [F_CACHE_RATIO] = {"esd_cache_hit_ratio", "gauge",
                       "Hits over needed rows since the node started"},
    [F_CACHE_HITS] = {"esd_cache_hits_total", "counter",
                      "Needed rows found latest in the cache, by table"},
    [F_CACHE_MISSES] = {"esd_cache_misses_total", "counter",
                        "Needed rows pulled, by table and reason (absent, outdated)"},
    [F_CACHE_EVICT] = {"esd_cache_evictions_total", "counter",
                       "Rows evicted, by table and state (clean, dirty: evict-pushed)"},
    [F_DISP_STEPS] = {"esd_dispatch_steps_total", "counter", "Dispatch decisions made"},
    [F_DISP_MEAN] = {"esd_dispatch_decision_mean_seconds", "gauge",
                     "Mean time of a whole dispatch step"},
    [F_DISP_LAST] = {"esd_dispatch_decision_last_seconds", "gauge",
                     "Time of the last dispatch step"},
    [F_DISP_SOLVE] = {"esd_dispatch_solve_mean_seconds", "gauge",
                      "Mean time of the solver within a step"},
    [F_DISP_REGRET_MED] = {"esd_dispatch_regret_median", "gauge",
                           "Median regret of the last decision, in cost-matrix units"},
    [F_DISP_REGRET_MAX] = {"esd_dispatch_regret_max", "gauge",
                           "Largest regret of the last decision, in cost-matrix units"},
    [F_DISP_XFERS] = {"esd_dispatch_transfers_total", "counter",
                      "Row transfers the decisions implied, by kind"},
    [F_DISP_EST] = {"esd_dispatch_estimated_cost_total", "counter",
                    "Sum of the decisions' costs on the cost matrix, in its units"},
    [F_DISP_TRUE] = {"esd_dispatch_true_cost_seconds_total", "counter",
                     "Sum of the decisions' true consequence costs (row transfer time)"},
    [F_DISP_GAP] = {"esd_dispatch_heu_opt_gap", "gauge",
                    "heu cost over opt cost minus 1, summed over steps (compare mode only)"},
    [F_PS_ITER] = {"esd_ps_iteration", "gauge", "Last iteration whose barrier was released"},
    [F_PS_CONN] = {"esd_ps_connected_workers", "gauge", "Workers connected to the shard"},
    [F_PS_ROWS] = {"esd_ps_rows", "gauge", "Rows stored on the shard"},
    [F_PS_BARRIERS] = {"esd_ps_barriers_total", "counter", "Barriers released"},
    [F_PS_PULLED] = {"esd_ps_pulled_rows_total", "counter", "Rows served to pulls"},
    [F_PS_VALUE] = {"esd_ps_value_rows_total", "counter", "Row values pushed to the shard"},
    [F_PS_GRAD] = {"esd_ps_grad_rows_total", "counter", "Row gradients pushed to the shard"},
    [F_PS_CKPT] = {"esd_ps_checkpoints_total", "counter", "Checkpoints written"},
    [F_PS_FAILED] = {"esd_ps_failed", "gauge", "1 if the job failed on this shard"},
    [F_NODE_CPU] = {"esd_node_cpu_seconds_total", "counter",
                    "CPU time of the daemon's dispatcher and main thread by phase"},
    [F_PS_CPU] = {"esd_ps_cpu_seconds_total", "counter",
                  "CPU time of the shard's link threads by phase"},
};

struct buf {
	char *p;
	size_t len, cap;
};

static void bputf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bputf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		size_t room = b->cap - b->len;
		va_start(ap, fmt);
		int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (b->p && (size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		size_t ncap = (b->cap ? b->cap * 2 : 4096) + (size_t)n + 1;
		char *np = realloc(b->p, ncap);
		if (!np)
			return;
		b->p = np;
		b->cap = ncap;
	}
}

/* Label values: escape \, " and newline as the format asks. */
static void esc(const char *s, char *out, size_t len)
{
	size_t o = 0;
	for (; *s && o + 2 < len; s++) {
		if (*s == '\\' || *s == '"') {
			out[o++] = '\\';
			out[o++] = *s;
		} else if (*s == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *s;
		}
	}
	out[o] = 0;
}

static struct buf fb[F_N];

static void sample(enum fam_id f, const char *labels, double v)
{
	bputf(&fb[f], "%s{%s} %.17g\n", fams[f].name, labels, v);
}

/* A status reply's "cpu" object (PHASE_ms: cumulative milliseconds) as
 * samples of family f labelled phase="PHASE". */
static void cpu_samples(enum fam_id f, const char *labels, json_t *st)
{
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(st, "cpu"), k, v)
	{
		size_t n = strlen(k);
		if (!json_is_number(v) || n < 4 || strcmp(k + n - 3, "_ms"))
			continue;
		char L[1500];
		snprintf(L, sizeof(L), "%s,phase=\"%.*s\"", labels, (int)(n - 3), k);
		sample(f, L, json_number_value(v) / 1e3);
	}
}

/* Long: one Prometheus sample after another for a node's figures; each line is a metric's
 * name and value. */
static void node_metrics(const struct esdctl *ctl, int i, json_t *st, const char *sock)
{
	char L[1400], L2[1600];
	snprintf(L, sizeof(L), "socket=\"%s\",rank=\"%d\"", sock, (int)esdctl_num(st, "rank"));
	sample(F_NODE_ITER, L, esdctl_num(st, "iteration"));
	sample(F_NODE_ITERS, L, esdctl_num(st, "iterations"));
	sample(F_NODE_IPS, L, esdctl_num(st, "iters_per_s"));
	sample(F_NODE_LOSS, L, esdctl_num(st, "loss"));
	sample(F_NODE_TRAINER, L, json_is_true(json_object_get(st, "trainer_attached")));
	sample(F_NODE_DEATHS, L, esdctl_num(st, "trainer_deaths"));
	cpu_samples(F_NODE_CPU, L, st);

	json_t *r = NULL;
	if (!esdctl_cmd(ctl, i, "links", true, &r)) {
		size_t j;
		json_t *l;
		json_array_foreach(json_object_get(r, "links"), j, l)
		{
			char LS[1500];
			snprintf(LS, sizeof(LS), "%s,shard=\"%d\"", L, (int)esdctl_num(l, "shard"));
			sample(F_LINK_RATE, LS, esdctl_num(l, "rate_bps") / 8);
			sample(F_LINK_WIRE, LS, esdctl_num(l, "wire_tx_bytes"));
			sample(F_LINK_WAIT, LS, esdctl_num(l, "shaped_wait_ns") / 1e9);
			for (int k = 0; k < ESD_XFER_NKINDS; k++) {
				json_t *o = json_object_get(l, esd_xfer_kind_name(k));
				snprintf(L2, sizeof(L2), "%s,kind=\"%s\"", LS, esd_xfer_kind_name(k));
				sample(F_LINK_TX_BYTES, L2, esdctl_num(o, "tx_bytes"));
				sample(F_LINK_TX_ROWS, L2, esdctl_num(o, "tx_rows"));
				sample(F_LINK_RX_BYTES, L2, esdctl_num(o, "rx_bytes"));
				sample(F_LINK_RX_ROWS, L2, esdctl_num(o, "rx_rows"));
			}
		}
		json_decref(r);
	}
	r = NULL;
	if (!esdctl_cmd(ctl, i, "cache", true, &r)) {
		sample(F_CACHE_BYTES, L, esdctl_num(r, "bytes"));
		sample(F_CACHE_CAP, L, esdctl_num(r, "capacity_rows"));
		sample(F_CACHE_USED, L, esdctl_num(r, "rows_used"));
		sample(F_CACHE_RATIO, L, esdctl_num(r, "hit_ratio"));
		size_t j;
		json_t *t;
		json_array_foreach(json_object_get(r, "per_table"), j, t)
		{
			char tab[32];
			json_t *id = json_object_get(t, "table");
			if (json_is_integer(id))
				snprintf(tab, sizeof(tab), "%lld",
				         (long long)json_integer_value(id));
			else
				snprintf(tab, sizeof(tab), "other");
			snprintf(L2, sizeof(L2), "%s,table=\"%s\"", L, tab);
			sample(F_CACHE_HITS, L2, esdctl_num(t, "hits"));
			char L3[1700];
			snprintf(L3, sizeof(L3), "%s,reason=\"absent\"", L2);
			sample(F_CACHE_MISSES, L3, esdctl_num(t, "miss_absent"));
			snprintf(L3, sizeof(L3), "%s,reason=\"outdated\"", L2);
			sample(F_CACHE_MISSES, L3, esdctl_num(t, "miss_outdated"));
			snprintf(L3, sizeof(L3), "%s,state=\"clean\"", L2);
			sample(F_CACHE_EVICT, L3, esdctl_num(t, "evict_clean"));
			snprintf(L3, sizeof(L3), "%s,state=\"dirty\"", L2);
			sample(F_CACHE_EVICT, L3, esdctl_num(t, "evict_dirty"));
		}
		json_decref(r);
	}
	r = NULL;
	if (!esdctl_cmd(ctl, i, "dispatch", true, &r)) {
		char m[64];
		esc(esdctl_str(r, "method"), m, sizeof(m));
		snprintf(L2, sizeof(L2), "%s,method=\"%s\"", L, m);
		sample(F_DISP_STEPS, L2, esdctl_num(r, "steps"));
		sample(F_DISP_MEAN, L2, esdctl_num(r, "decision_ms_mean") / 1e3);
		sample(F_DISP_LAST, L2, esdctl_num(r, "decision_ms_last") / 1e3);
		sample(F_DISP_SOLVE, L2, esdctl_num(r, "solve_ms_mean") / 1e3);
		sample(F_DISP_REGRET_MED, L2, esdctl_num(r, "regret_median"));
		sample(F_DISP_REGRET_MAX, L2, esdctl_num(r, "regret_max"));
		sample(F_DISP_EST, L2, esdctl_num(r, "est_cost_sum"));
		sample(F_DISP_TRUE, L2, esdctl_num(r, "true_cost_sum") / 1e9);
		if (json_is_number(json_object_get(r, "heu_opt_gap")))
			sample(F_DISP_GAP, L2, esdctl_num(r, "heu_opt_gap"));
		static const char *const xk[][2] = {{"miss_pulls", "miss_pull"},
		                                    {"update_values", "update_value"},
		                                    {"update_grads", "update_grad"},
		                                    {"evict_pushes", "evict_push"}};
		for (int k = 0; k < ESD_XFER_NKINDS; k++) {
			char L3[1700];
			snprintf(L3, sizeof(L3), "%s,kind=\"%s\"", L, xk[k][1]);
			sample(F_DISP_XFERS, L3, esdctl_num(r, xk[k][0]));
		}
		json_decref(r);
	}
}

static void ps_metrics(json_t *st, const char *sock)
{
	char L[1400];
	snprintf(L, sizeof(L), "socket=\"%s\",shard=\"%d\"", sock, (int)esdctl_num(st, "shard"));
	sample(F_PS_ITER, L, esdctl_num(st, "iteration"));
	sample(F_PS_CONN, L, esdctl_num(st, "connected"));
	sample(F_PS_ROWS, L, esdctl_num(st, "rows"));
	sample(F_PS_BARRIERS, L, esdctl_num(st, "barriers"));
	sample(F_PS_PULLED, L, esdctl_num(st, "pulled_rows"));
	sample(F_PS_VALUE, L, esdctl_num(st, "value_rows"));
	sample(F_PS_GRAD, L, esdctl_num(st, "grad_rows"));
	sample(F_PS_CKPT, L, esdctl_num(st, "checkpoints"));
	sample(F_PS_FAILED, L, json_is_string(json_object_get(st, "failed")));
	cpu_samples(F_PS_CPU, L, st);
}

char *esdctl_metrics_text(const struct esdctl *ctl)
{
	memset(fb, 0, sizeof(fb));
	for (int i = 0; i < ctl->ntargets; i++) {
		char sock[1100], L[1200];
		esc(ctl->targets[i], sock, sizeof(sock));
		json_t *st = NULL;
		int rc = esdctl_cmd(ctl, i, "status", true, &st);
		const char *role = rc ? "unknown" : esdctl_str(st, "role");
		snprintf(L, sizeof(L), "socket=\"%s\",role=\"%s\"", sock,
		         !strcmp(role, "ps")     ? "ps"
		         : !strcmp(role, "esdd") ? "esdd"
		                                 : "unknown");
		sample(F_UP, L, rc ? 0 : 1);
		if (!rc && !strcmp(role, "esdd"))
			node_metrics(ctl, i, st, sock);
		else if (!rc && !strcmp(role, "ps"))
			ps_metrics(st, sock);
		json_decref(st);
	}
	struct buf out = {0};
	for (int f = 0; f < F_N; f++) {
		if (!fb[f].len)
			continue;
		bputf(&out, "# HELP %s %s\n# TYPE %s %s\n%.*s", fams[f].name, fams[f].help,
		      fams[f].name, fams[f].type, (int)fb[f].len, fb[f].p);
		free(fb[f].p);
	}
	memset(fb, 0, sizeof(fb));
	if (!out.p)
		out.p = calloc(1, 1);
	return out.p;
}

int esdctl_metrics(const struct esdctl *ctl)
{
	/* first a plain status call per target: a missing daemon gets the
	 * one-line error and a non-zero exit, as every other command */
	int worst = 0;
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *st = NULL;
		int rc = esdctl_cmd(ctl, i, "status", false, &st);
		json_decref(st);
		if (rc > worst)
			worst = rc;
	}
	if (worst)
		return worst;
	char *txt = esdctl_metrics_text(ctl);
	if (!txt)
		return ESDCTL_EFAIL;
	fputs(txt, stdout);
	free(txt);
	return 0;
}
