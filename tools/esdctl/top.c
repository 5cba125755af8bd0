/*
 * esdctl top: a live view of a running job, refreshed in place.
 *
 * Every interval it asks each target (PS shards' control sockets; shard 0
 * carries every node's last report, so shard 0 alone shows the whole job,
 * wherever its nodes run) for its status, and turns the running totals of
 * two successive replies into rates: iterations/s, decision ms per step,
 * CPU ms per iteration, link bytes/s and the share of the link's rate they
 * use, and the cache hit ratio over the interval. The first frame has no
 * previous reply and shows totals since the start instead.
 */
#include "esdctl.h"

#include <esd/clock.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOP_MAX_NODES 64

/* One node's or shard's last reply (running totals). */
struct top_prev {
	json_t *r;     /* NULL until the first */
	json_t *rates; /* what r gave against the one before */
};

struct top {
	const struct esdctl *ctl;
	double interval_s;
	long frames; /* 0: until the job ends */
	bool tty;
	bool quiet; /* after the first frame: a target that stops answering ended */
	struct top_prev node[TOP_MAX_NODES];
	struct top_prev shard[ESDCTL_MAX_TARGETS];
};

/* The change of key between the previous and this reply (the total when
 * there is no previous one). */
static double delta(json_t *prev, json_t *now, const char *key)
{
	return esdctl_num(now, key) - (prev ? esdctl_num(prev, key) : 0);
}

/* Seconds between the two replies; with no previous one, since the
 * process started (t0_ns), so the first frame shows averages. */
static double delta_s(json_t *prev, json_t *now)
{
	return (esdctl_num(now, "t_ns") - esdctl_num(prev ? prev : now, prev ? "t_ns" : "t0_ns")) /
	       1e9;
}

/* "37%", or "-" for an unshaped link (rate 0: no share to show). */
static const char *use_str(json_t *n, const char *key, char *buf, size_t len)
{
	if (!json_is_number(json_object_get(n, key)))
		return "-";
	snprintf(buf, len, "%.0f%%", 100 * esdctl_num(n, key));
	return buf;
}

static const char *rate_str(double bytes_per_s, char *buf, size_t len)
{
	char b[32];
	snprintf(buf, len, "%s/s", esdctl_bytes(bytes_per_s, b, sizeof(b)));
	return buf;
}

/* CPU ms per iteration of each phase of the process's "cpu" object (ms
 * summed since it started) between two replies; NULL when it has none. */
static json_t *phase_rates(json_t *prev, json_t *now, double dit)
{
	json_t *c = json_object_get(now, "cpu"), *pc = prev ? json_object_get(prev, "cpu") : NULL;
	const char *k;
	json_t *v;
	if (!json_is_object(c) || dit <= 0)
		return NULL;
	json_t *o = json_object();
	json_object_foreach(c, k, v)
	{
		double d = json_number_value(v) - (pc ? esdctl_num(pc, k) : 0);
		json_object_set_new(o, k, json_real(d / dit));
	}
	return o;
}

/* The rates of one node between two reports, as JSON (what --json prints
 * and the table shows). */
static json_t *node_rates(json_t *prev, json_t *now)
{
	double dt = delta_s(prev, now);
	double dit = delta(prev, now, "iteration");
	double dsteps = delta(prev, now, "steps");
	double dh = delta(prev, now, "hits"), dm = delta(prev, now, "misses");
	double rate = esdctl_num(now, "rate_bps");
	double tx = dt > 0 ? delta(prev, now, "tx_bytes") / dt : 0;
	double rx = dt > 0 ? delta(prev, now, "rx_bytes") / dt : 0;
	json_t *o = json_pack(
	    "{s:i, s:b, s:s, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:i, s:i}", "rank",
	    (int)esdctl_num(now, "rank"), "connected",
	    json_is_true(json_object_get(now, "connected")), "host", esdctl_str(now, "host"),
	    "iteration", (json_int_t)esdctl_num(now, "iteration"), "iters_per_s",
	    dt > 0 ? dit / dt : 0.0, "decision_ms", dsteps > 0 ? delta(prev, now, "decision_ns") / 1e6 / dsteps : 0.0,
	    "cpu_ms_per_iter", dit > 0 ? delta(prev, now, "cpu_ns") / 1e6 / dit : 0.0,
	    "tx_bytes_per_s", tx, "rx_bytes_per_s", rx, "hit_ratio", dh + dm > 0 ? dh / (dh + dm) : 0.0, "age_s", esdctl_num(now, "age_s"),
	    "trainers", (int)esdctl_num(now, "trainers"), "trainers_expected",
	    (int)esdctl_num(now, "trainers_expected"));
	json_t *ph = phase_rates(prev, now, dit);
	if (ph)
		json_object_set_new(o, "cpu_ms_per_iter_by_phase", ph);
	/* the share of the link's rate the bytes use (null: unshaped) */
	json_object_set_new(o, "tx_rate_use", rate > 0 ? json_real(tx * 8 / rate) : json_null());
	json_object_set_new(o, "rx_rate_use", rate > 0 ? json_real(rx * 8 / rate) : json_null());
	return o;
}

/* The rates of one shard between two status replies. */
static json_t *shard_rates(json_t *prev, json_t *now)
{
	double dt = delta_s(prev, now);
	double dit = delta(prev, now, "iteration");
	json_t *o = json_pack("{s:i, s:I, s:I, s:f, s:f, s:f, s:s?}", "shard",
			 (int)esdctl_num(now, "shard"), "iteration",
			 (json_int_t)esdctl_num(now, "iteration"), "rows",
			 (json_int_t)esdctl_num(now, "rows"), "iters_per_s", dt > 0 ? dit / dt : 0.0,
			 "pulled_rows_per_s", dt > 0 ? delta(prev, now, "pulled_rows") / dt : 0.0,
			 "cpu_ms_per_iter", dit > 0 ? delta(prev, now, "cpu_ns") / 1e6 / dit : 0.0,
			 "failed", json_string_value(json_object_get(now, "failed")));
	json_t *ph = phase_rates(prev, now, dit);
	if (o && ph)
		json_object_set_new(o, "cpu_ms_per_iter_by_phase", ph);
	return o;
}

/* CPU ms per iteration by phase: one line per process, a column per phase
 * (the phases of the first that has them; who names the line). */
static void print_phases(json_t *rows, const char *who)
{
	json_t *first = NULL, *r;
	size_t i;
	const char *k;
	json_t *v;
	json_array_foreach(rows, i, r)
	{
		if (!first)
			first = json_object_get(r, "cpu_ms_per_iter_by_phase");
	}
	if (!first)
		return;
	printf("\n%-5s cpu ms/it by phase:", who);
	json_object_foreach(first, k, v)
	{
		int len = (int)strlen(k) - 3; /* without "_ms" */
		printf(" %*.*s", len < 8 ? 8 : len, len, k);
	}
	putchar('\n');
	json_array_foreach(rows, i, r)
	{
		json_t *ph = json_object_get(r, "cpu_ms_per_iter_by_phase");
		if (!ph)
			continue;
		printf("%5d                   ", (int)esdctl_num(r, who[0] == 's' ? "shard" : "rank"));
		json_object_foreach(first, k, v)
		{
			int len = (int)strlen(k) - 3;
			printf(" %*.2f", len < 8 ? 8 : len, esdctl_num(ph, k));
		}
		putchar('\n');
	}
}

static void print_shards(json_t *shards)
{
	size_t i;
	json_t *s;
	printf("shard  iteration       rows    it/s   pulled rows/s  cpu ms/it\n");
	json_array_foreach(shards, i, s)
	{
		printf("%5d %10.0f %10.0f %7.2f %15.0f %10.2f\n", (int)esdctl_num(s, "shard"),
		       esdctl_num(s, "iteration"), esdctl_num(s, "rows"), esdctl_num(s, "iters_per_s"),
		       esdctl_num(s, "pulled_rows_per_s"), esdctl_num(s, "cpu_ms_per_iter"));
		if (json_is_string(json_object_get(s, "failed")))
			printf("      failed: %s\n", esdctl_str(s, "failed"));
	}
}

static void print_nodes(json_t *nodes)
{
	size_t i;
	json_t *n;
	char a[32], b[32], ua[16], ub[16];
	printf("\nnode host             iteration    it/s  dec ms  cpu ms/it        tx/s  use"
	       "        rx/s  use   hit%%  trainers\n");
	json_array_foreach(nodes, i, n)
	{
		if (!json_is_true(json_object_get(n, "connected"))) {
			printf("%4d %-16s (not connected)\n", (int)esdctl_num(n, "rank"),
			       esdctl_str(n, "host"));
			continue;
		}
		printf("%4d %-16.16s %9.0f %7.2f %7.2f %10.2f %11s %4s %11s %4s %5.1f%% "
		       "%4d/%d%s\n",
		       (int)esdctl_num(n, "rank"), esdctl_str(n, "host"), esdctl_num(n, "iteration"),
		       esdctl_num(n, "iters_per_s"), esdctl_num(n, "decision_ms"),
		       esdctl_num(n, "cpu_ms_per_iter"),
		       rate_str(esdctl_num(n, "tx_bytes_per_s"), a, sizeof(a)),
		       use_str(n, "tx_rate_use", ua, sizeof(ua)),
		       rate_str(esdctl_num(n, "rx_bytes_per_s"), b, sizeof(b)),
		       use_str(n, "rx_rate_use", ub, sizeof(ub)), 100 * esdctl_num(n, "hit_ratio"),
		       (int)esdctl_num(n, "trainers"), (int)esdctl_num(n, "trainers_expected"),
		       esdctl_num(n, "age_s") > 5 ? "  (report late)" : "");
	}
}

/* Shard 0's nodes[] against the previous frame's. */
static void add_nodes(struct top *t, json_t *status, json_t *frame_nodes)
{
	size_t i;
	json_t *n;
	json_array_foreach(json_object_get(status, "nodes"), i, n)
	{
		int w = (int)esdctl_num(n, "rank");
		if (w < 0 || w >= TOP_MAX_NODES)
			continue;
		struct top_prev *p = &t->node[w];
		/* a node reports about once a second: an unchanged report keeps
		 * the rates it gave */
		if (!p->r || delta(p->r, n, "t_ns") > 0) {
			json_decref(p->rates);
			p->rates = node_rates(p->r, n);
			json_decref(p->r);
			p->r = json_incref(n);
		}
		json_object_set_new(p->rates, "connected",
				    json_boolean(json_is_true(json_object_get(n, "connected"))));
		json_object_set_new(p->rates, "age_s", json_real(esdctl_num(n, "age_s")));
		json_array_append_new(frame_nodes, json_deep_copy(p->rates));
	}
}

/* One frame: every target's status, as rates against the last frame.
 * Returns 0, or the exit code of a target that failed to answer. */
static int frame(struct top *t, json_t **out)
{
	json_t *shards = json_array(), *nodes = json_array();
	const char *method = "-";
	double iter = 0, iters = 0;
	int rc = 0;
	for (int i = 0; i < t->ctl->ntargets && !rc; i++) {
		json_t *r = NULL;
		rc = esdctl_cmd(t->ctl, i, "status", t->quiet, &r);
		if (rc)
			break;
		if (strcmp(esdctl_str(r, "role"), "ps")) {
			fprintf(stderr, "esdctl: top: %s is not a PS shard's control socket (point "
			                "it at shard 0's --control socket)\n",
			        t->ctl->targets[i]);
			json_decref(r);
			rc = ESDCTL_EUSAGE;
			break;
		}
		json_array_append_new(shards, shard_rates(t->shard[i].r, r));
		if (esdctl_num(r, "shard") == 0) {
			add_nodes(t, r, nodes);
			iter = esdctl_num(r, "iteration");
			iters = esdctl_num(r, "iterations");
		}
		json_decref(t->shard[i].r);
		t->shard[i].r = r;
	}
	if (t->node[0].r)
		method = esdctl_str(t->node[0].r, "method");
	*out = json_pack("{s:f, s:f, s:s, s:o, s:o}", "iteration", iter, "iterations", iters,
			 "method", method, "shards", shards, "nodes", nodes);
	return rc;
}

static void render(const struct top *t, json_t *f)
{
	if (t->ctl->json) {
		char *s = json_dumps(f, JSON_COMPACT | JSON_REAL_PRECISION(6));
		if (s)
			puts(s);
		free(s);
	} else {
		if (t->tty)
			fputs("\033[H\033[J", stdout); /* home, clear: refresh in place */
		printf("esdctl top: iteration %.0f of %.0f, method %s, every %.1f s\n\n",
		       esdctl_num(f, "iteration"), esdctl_num(f, "iterations"),
		       esdctl_str(f, "method"), t->interval_s);
		print_shards(json_object_get(f, "shards"));
		print_nodes(json_object_get(f, "nodes"));
		print_phases(json_object_get(f, "shards"), "shard");
		print_phases(json_object_get(f, "nodes"), "node");
		if (!t->tty)
			putchar('\n');
	}
	fflush(stdout);
}

int esdctl_top(const struct esdctl *ctl, double interval_s, long frames)
{
	static struct top t;
	t.ctl = ctl;
	t.interval_s = interval_s;
	t.frames = frames;
	t.tty = isatty(STDOUT_FILENO) && !ctl->json;
	int shown = 0, rc = 0;
	for (long k = 0; !frames || k < frames; k++) {
		if (k)
			esd_sleep_ns((int64_t)(interval_s * 1e9));
		json_t *f = NULL;
		rc = frame(&t, &f);
		if (rc) {
			json_decref(f);
			break;
		}
		render(&t, f);
		json_decref(f);
		shown++;
		t.quiet = true;
	}
	for (int i = 0; i < TOP_MAX_NODES; i++) {
		json_decref(t.node[i].r);
		json_decref(t.node[i].rates);
	}
	for (int i = 0; i < ESDCTL_MAX_TARGETS; i++)
		json_decref(t.shard[i].r);
	/* the job ended under a view that saw it: not an error */
	if (rc == ESDCTL_ENODAEMON && shown) {
		printf("esdctl top: the job's shards no longer answer (the job ended)\n");
		return ESDCTL_OK;
	}
	return rc;
}
