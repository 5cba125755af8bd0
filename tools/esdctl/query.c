/*
 * The query subcommands of esdctl (status, links, cache, dispatch, set,
 * checkpoint): one request per target, the reply printed as a table or,
 * with --json, as JSON with the target's socket added.
 */
#include "esdctl.h"

#include <esd/clock.h>
#include <esd/ctl.h>
#include <esd/err.h>
#include <esd/types.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* esdctl --worker W: req goes to node W through PS shard 0 (relay); the
 * node's own reply, or an error reply, is what comes back. */
static int relay_call(const struct esdctl *ctl, const char *path, json_t *req, json_t **out)
{
	json_t *wrap = json_pack("{s:s, s:i, s:O}", "cmd", "relay", "worker", ctl->worker,
				 "request", req);
	json_t *r = NULL;
	/* the node answers after a barrier or two: a longer wait */
	int rc = esd_ctl_call(path, wrap, ctl->timeout_ms + 30000, &r);
	json_decref(wrap);
	if (rc)
		return rc;
	json_t *inner = json_object_get(r, "reply");
	*out = inner ? json_incref(inner) : json_incref(r);
	json_decref(r);
	return 0;
}

int esdctl_call(const struct esdctl *ctl, int i, json_t *req, bool quiet, json_t **reply)
{
	const char *path = ctl->targets[i];
	json_t *r = NULL;
	int rc = ctl->worker >= 0 ? relay_call(ctl, path, req, &r)
				  : esd_ctl_call(path, req, ctl->timeout_ms, &r);
	if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -ENOTSOCK) {
		if (!quiet) {
			char abs[PATH_MAX + 8], cwd[PATH_MAX];
			if (path[0] != '/' && getcwd(cwd, sizeof(cwd)))
				snprintf(abs, sizeof(abs), "%s/%s", cwd, path);
			else
				snprintf(abs, sizeof(abs), "%s", path);
			fprintf(
			    stderr,
			    "esdctl: no daemon answers on %s (%s): start one with "
			    "'esdd --config JOB.ini --rank W --dir DIR' (socket DIR/control.sock) "
			    "or 'esd-ps --config JOB.ini --control PATH', and point esdctl at it "
			    "with --node DIR or --socket PATH\n",
			    abs, strerror(-rc));
		}
		return ESDCTL_ENODAEMON;
	}
	if (rc) {
		if (!quiet)
			fprintf(stderr, "esdctl: %s: request failed: %s\n", path,
			        rc == -ETIMEDOUT ? "no reply in time (daemon busy or hung)"
			                         : esd_strerror(rc));
		return rc == -ENAMETOOLONG ? ESDCTL_EUSAGE : ESDCTL_EFAIL;
	}
	if (!json_is_true(json_object_get(r, "ok"))) {
		if (!quiet) {
			const char *e = json_string_value(json_object_get(r, "error"));
			fprintf(stderr, "esdctl: %s: %s\n", path,
			        e ? e : "refused (no reason given)");
		}
		json_decref(r);
		return ESDCTL_EFAIL;
	}
	json_object_set_new(r, "socket", json_string(path));
	*reply = r;
	return 0;
}

int esdctl_cmd(const struct esdctl *ctl, int i, const char *cmd, bool quiet, json_t **reply)
{
	json_t *req = json_pack("{s:s}", "cmd", cmd);
	int rc = esdctl_call(ctl, i, req, quiet, reply);
	json_decref(req);
	return rc;
}

void esdctl_print_json(json_t *obj)
{
	char *s = json_dumps(obj, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
	if (s) {
		puts(s);
		free(s);
	}
}

double esdctl_num(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_number(v) ? json_number_value(v) : 0.0;
}

const char *esdctl_str(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "-";
}

const char *esdctl_bytes(double b, char *buf, size_t len)
{
	static const char *const u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	int i = 0;
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", b, u[i]);
	return buf;
}

static const char *rate_str(double bps, char *buf, size_t len)
{
	if (bps <= 0)
		snprintf(buf, len, "unshaped");
	else if (bps >= 1e9)
		snprintf(buf, len, "%.3g Gbit/s", bps / 1e9);
	else if (bps >= 1e6)
		snprintf(buf, len, "%.3g Mbit/s", bps / 1e6);
	else
		snprintf(buf, len, "%.3g kbit/s", bps / 1e3);
	return buf;
}

/* Which daemons serve which command; "" for both. */
static const char *role_of_cmd(const char *cmd)
{
	if (!strcmp(cmd, "status") || !strcmp(cmd, "stop"))
		return "";
	if (!strcmp(cmd, "checkpoint"))
		return "ps";
	return "esdd";
}

/* Whether target i should get cmd: with several targets, a daemon of the
 * other kind is skipped (esdctl --node A --socket PS.sock links); with
 * one, it is an error naming the right kind. Returns 0 (send), 1 (skip)
 * or an exit code. */
static int applies(const struct esdctl *ctl, int i, const char *cmd)
{
	const char *want = role_of_cmd(cmd);
	json_t *st = NULL;
	if (!*want)
		return 0;
	int rc = esdctl_cmd(ctl, i, "status", false, &st);
	if (rc)
		return rc;
	const char *role = esdctl_str(st, "role");
	bool ok = !strcmp(role, want);
	if (!ok && ctl->ntargets == 1)
		fprintf(stderr, "esdctl: %s is %s, and '%s' is a command of %s (%s)\n",
		        ctl->targets[i], !strcmp(role, "ps") ? "an esd-ps" : "an esdd", cmd,
		        !strcmp(want, "ps") ? "esd-ps" : "esdd",
		        !strcmp(want, "ps") ? "--socket PS_CONTROL" : "--node NODE_DIR");
	json_decref(st);
	return ok ? 0 : ctl->ntargets == 1 ? ESDCTL_EUSAGE : 1;
}

/* Run cmd on every target it applies to; replies[i] NULL where it failed
 * or was skipped. Returns the worst exit code. */
static int gather(const struct esdctl *ctl, const char *cmd, json_t **replies)
{
	int worst = 0;
	for (int i = 0; i < ctl->ntargets; i++) {
		replies[i] = NULL;
		int rc = applies(ctl, i, cmd);
		if (rc == 1)
			continue;
		if (!rc)
			rc = esdctl_cmd(ctl, i, cmd, false, &replies[i]);
		if (rc > worst)
			worst = rc;
	}
	return worst;
}

/* --json: one object for one target, an array for several. */
static void print_replies_json(const struct esdctl *ctl, json_t **replies)
{
	if (ctl->ntargets == 1) {
		if (replies[0])
			esdctl_print_json(replies[0]);
		return;
	}
	json_t *arr = json_array();
	for (int i = 0; i < ctl->ntargets; i++)
		if (replies[i])
			json_array_append(arr, replies[i]);
	esdctl_print_json(arr);
	json_decref(arr);
}

static void free_replies(const struct esdctl *ctl, json_t **replies)
{
	for (int i = 0; i < ctl->ntargets; i++)
		json_decref(replies[i]);
}

/* "node 3" / "ps 0" from a quiet status call, else the socket path. */
static void label_of(const struct esdctl *ctl, int i, char *buf, size_t len)
{
	json_t *st = NULL;
	if (!esdctl_cmd(ctl, i, "status", true, &st)) {
		if (!strcmp(esdctl_str(st, "role"), "ps"))
			snprintf(buf, len, "ps %d", (int)esdctl_num(st, "shard"));
		else
			snprintf(buf, len, "node %d", (int)esdctl_num(st, "rank"));
	} else {
		snprintf(buf, len, "%s", ctl->targets[i]);
	}
	json_decref(st);
}

/* Shard 0's view of every node of the job (their last reports). */
static void print_nodes(json_t *nodes)
{
	size_t i;
	json_t *n;
	if (!json_array_size(nodes))
		return;
	printf("  %-5s %-16s %8s %10s %8s %10s %9s %12s %12s %6s\n", "NODE", "HOST", "PID",
	       "ITERATION", "IT/S", "LOSS", "TRAINERS", "TX_BYTES", "RX_BYTES", "AGE_S");
	json_array_foreach(nodes, i, n)
	{
		if (!json_object_get(n, "iteration")) {
			printf("  %-5.0f %-16s (no report yet%s)\n", esdctl_num(n, "rank"), "-",
			       json_is_true(json_object_get(n, "connected")) ? "" : ", not connected");
			continue;
		}
		printf("  %-5.0f %-16s %8.0f %10.0f %8.2f %10.6f %5.0f/%-3.0f %12.0f %12.0f %6.1f\n",
		       esdctl_num(n, "rank"), esdctl_str(n, "host"), esdctl_num(n, "pid"),
		       esdctl_num(n, "iteration"), esdctl_num(n, "iters_per_s"),
		       esdctl_num(n, "loss"), esdctl_num(n, "trainers"),
		       esdctl_num(n, "trainers_expected"), esdctl_num(n, "tx_bytes"),
		       esdctl_num(n, "rx_bytes"), esdctl_num(n, "age_s"));
	}
}

int esdctl_status(const struct esdctl *ctl)
{
	json_t *rep[ESDCTL_MAX_TARGETS];
	int rc = gather(ctl, "status", rep);
	if (ctl->json) {
		print_replies_json(ctl, rep);
		free_replies(ctl, rep);
		return rc;
	}
	bool hdr_node = false, hdr_ps = false;
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = rep[i];
		if (!r || strcmp(esdctl_str(r, "role"), "esdd"))
			continue;
		if (!hdr_node)
			printf("%-6s %5s %12s %12s %9s %10s %8s %7s %-8s %6s %-9s\n", "NODE",
			       "RANK", "ITERATION", "OF", "IT/S", "LOSS", "TRAINERS", "DEATHS",
			       "METHOD", "ALPHA", "SYNC");
		hdr_node = true;
		/* attached of expected (workers.trainers) */
		json_t *tr = json_object_get(r, "trainers");
		size_t k, att = 0;
		json_t *t;
		json_array_foreach(tr, k, t) att += json_is_true(json_object_get(t, "attached"));
		char trs[24];
		snprintf(trs, sizeof(trs), "%zu/%zu", att, json_array_size(tr));
		printf("%-6s %5.0f %12.0f %12.0f %9.2f %10.6f %8s %7.0f %-8s %6.3g %-9s\n", "esdd",
		       esdctl_num(r, "rank"), esdctl_num(r, "iteration"),
		       esdctl_num(r, "iterations"), esdctl_num(r, "iters_per_s"),
		       esdctl_num(r, "loss"), trs, esdctl_num(r, "trainer_deaths"),
		       esdctl_str(r, "method"), esdctl_num(r, "alpha"), esdctl_str(r, "sync"));
	}
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = rep[i];
		if (!r || strcmp(esdctl_str(r, "role"), "ps"))
			continue;
		if (!hdr_ps)
			printf("%s%-6s %5s %12s %9s %12s %10s %12s %12s %11s  %s\n",
			       hdr_node ? "\n" : "", "PS", "SHARD", "ITERATION", "WORKERS", "ROWS",
			       "BARRIERS", "PULLED", "GRAD_ROWS", "CHECKPOINTS", "STATE");
		hdr_ps = true;
		json_t *f = json_object_get(r, "failed");
		printf(
		    "%-6s %5.0f %12.0f %4.0f of %-2.0f %12.0f %10.0f %12.0f %12.0f %11.0f  %s%s\n",
		    "esd-ps", esdctl_num(r, "shard"), esdctl_num(r, "iteration"),
		    esdctl_num(r, "connected"), esdctl_num(r, "workers"), esdctl_num(r, "rows"),
		    esdctl_num(r, "barriers"), esdctl_num(r, "pulled_rows"),
		    esdctl_num(r, "grad_rows"), esdctl_num(r, "checkpoints"),
		    json_is_string(f) ? "FAILED: " : "running",
		    json_is_string(f) ? json_string_value(f) : "");
		print_nodes(json_object_get(r, "nodes"));
	}
	free_replies(ctl, rep);
	return rc;
}

int esdctl_links(const struct esdctl *ctl)
{
	json_t *rep[ESDCTL_MAX_TARGETS];
	int rc = gather(ctl, "links", rep);
	if (ctl->json) {
		print_replies_json(ctl, rep);
		free_replies(ctl, rep);
		return rc;
	}
	for (int i = 0; i < ctl->ntargets; i++) {
		if (!rep[i])
			continue;
		char label[256], b1[32], b2[32], b3[32];
		label_of(ctl, i, label, sizeof(label));
		size_t j;
		json_t *l;
		json_array_foreach(json_object_get(rep[i], "links"), j, l)
		{
			printf("%s%s -> shard %.0f (%s %s): rate %s, wire %s, shaped wait %.3f s\n",
			       i || j ? "\n" : "", label, esdctl_num(l, "shard"),
			       esdctl_str(l, "backend"), esdctl_str(l, "peer"),
			       rate_str(esdctl_num(l, "rate_bps"), b1, sizeof(b1)),
			       esdctl_bytes(esdctl_num(l, "wire_tx_bytes"), b2, sizeof(b2)),
			       esdctl_num(l, "shaped_wait_ns") / 1e9);
			printf("  %-12s %12s %12s %12s %12s\n", "KIND", "TX_ROWS", "TX_BYTES",
			       "RX_ROWS", "RX_BYTES");
			for (int k = 0; k < ESD_XFER_NKINDS; k++) {
				json_t *o = json_object_get(l, esd_xfer_kind_name(k));
				printf("  %-12s %12.0f %12s %12.0f %12s\n", esd_xfer_kind_name(k),
				       esdctl_num(o, "tx_rows"),
				       esdctl_bytes(esdctl_num(o, "tx_bytes"), b2, sizeof(b2)),
				       esdctl_num(o, "rx_rows"),
				       esdctl_bytes(esdctl_num(o, "rx_bytes"), b3, sizeof(b3)));
			}
		}
	}
	free_replies(ctl, rep);
	return rc;
}

int esdctl_cache(const struct esdctl *ctl)
{
	json_t *rep[ESDCTL_MAX_TARGETS];
	int rc = gather(ctl, "cache", rep);
	if (ctl->json) {
		print_replies_json(ctl, rep);
		free_replies(ctl, rep);
		return rc;
	}
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = rep[i];
		if (!r)
			continue;
		char b1[32], b2[32];
		double cap = esdctl_num(r, "capacity_rows"), used = esdctl_num(r, "rows_used");
		printf("%snode %.0f: %.0f of %.0f rows used (%.1f%%), %s in %s pages, policy %s, "
		       "hit ratio %.4f at iteration %.0f\n",
		       i ? "\n" : "", esdctl_num(r, "rank"), used, cap,
		       cap > 0 ? 100.0 * used / cap : 0.0,
		       esdctl_bytes(esdctl_num(r, "bytes"), b1, sizeof(b1)),
		       esdctl_bytes(esdctl_num(r, "page_size"), b2, sizeof(b2)),
		       esdctl_str(r, "policy"), esdctl_num(r, "hit_ratio"),
		       esdctl_num(r, "last_iteration"));
		printf("  %-6s %12s %12s %14s %12s %12s %9s\n", "TABLE", "HITS", "MISS_ABSENT",
		       "MISS_OUTDATED", "EVICT_CLEAN", "EVICT_DIRTY", "HIT_RATIO");
		size_t j;
		json_t *t;
		json_array_foreach(json_object_get(r, "per_table"), j, t)
		{
			json_t *id = json_object_get(t, "table");
			char name[16];
			if (json_is_integer(id))
				snprintf(name, sizeof(name), "%lld",
				         (long long)json_integer_value(id));
			else
				snprintf(name, sizeof(name), "%s", esdctl_str(t, "table"));
			printf("  %-6s %12.0f %12.0f %14.0f %12.0f %12.0f %9.4f\n", name,
			       esdctl_num(t, "hits"), esdctl_num(t, "miss_absent"),
			       esdctl_num(t, "miss_outdated"), esdctl_num(t, "evict_clean"),
			       esdctl_num(t, "evict_dirty"), esdctl_num(t, "hit_ratio"));
		}
		printf("  %-6s %12.0f %12.0f %14.0f %12.0f %12.0f %9.4f\n", "all",
		       esdctl_num(r, "hits"), esdctl_num(r, "miss_absent"),
		       esdctl_num(r, "miss_outdated"), esdctl_num(r, "evict_clean"),
		       esdctl_num(r, "evict_dirty"), esdctl_num(r, "hit_ratio"));
	}
	free_replies(ctl, rep);
	return rc;
}

int esdctl_dispatch(const struct esdctl *ctl)
{
	json_t *rep[ESDCTL_MAX_TARGETS];
	int rc = gather(ctl, "dispatch", rep);
	if (ctl->json) {
		print_replies_json(ctl, rep);
		free_replies(ctl, rep);
		return rc;
	}
	bool hdr = false;
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = rep[i];
		if (!r)
			continue;
		char label[256], gap[32];
		label_of(ctl, i, label, sizeof(label));
		if (!hdr)
			printf("%-8s %-8s %6s %9s %11s %11s %10s %12s %12s %10s %10s\n", "NODE",
			       "METHOD", "ALPHA", "STEPS", "DECIDE_MS", "LAST_MS", "SOLVE_MS",
			       "REGRET_MED", "REGRET_MAX", "OPT_ROWS", "HEU_GAP");
		hdr = true;
		json_t *g = json_object_get(r, "heu_opt_gap");
		if (json_is_number(g))
			snprintf(gap, sizeof(gap), "%.2f%%", 100.0 * json_number_value(g));
		else
			snprintf(gap, sizeof(gap), "n/a");
		printf("%-8s %-8s %6.3g %9.0f %11.3f %11.3f %10.3f %12.0f %12.0f %10.0f %10s\n",
		       label, esdctl_str(r, "method"), esdctl_num(r, "alpha"),
		       esdctl_num(r, "steps"), esdctl_num(r, "decision_ms_mean"),
		       esdctl_num(r, "decision_ms_last"), esdctl_num(r, "solve_ms_mean"),
		       esdctl_num(r, "regret_median"), esdctl_num(r, "regret_max"),
		       esdctl_num(r, "opt_rows"), gap);
	}
	if (hdr)
		printf("(regret in ns of transfer cost, last decision; HEU_GAP: heu cost over opt "
		       "cost - 1, n/a unless the dispatcher compares both)\n");
	/* dispatch.gpu: who answered the exact part */
	bool ghdr = false;
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *g = rep[i] ? json_object_get(rep[i], "gpu") : NULL;
		if (!json_is_object(g))
			continue;
		char label[256];
		label_of(ctl, i, label, sizeof(label));
		if (!ghdr)
			printf("\n%-8s %11s %13s %8s %8s %12s %8s %9s %11s %7s\n", "NODE",
			       "GPU_SOLVED", "CPU_FALLBACK", "LATE", "BUSY", "GPU_REJECTED", "SMALL",
			       "MIN_ROWS", "LAST_GPU_US", "LAST_BY");
		ghdr = true;
		char minr[32] = "never";
		if (esdctl_num(g, "min_rows") >= 0)
			snprintf(minr, sizeof(minr), "%.0f", esdctl_num(g, "min_rows"));
		printf("%-8s %11.0f %13.0f %8.0f %8.0f %12.0f %8.0f %9s %11.0f %7s\n", label,
		       esdctl_num(g, "gpu_solved"), esdctl_num(g, "cpu_fallbacks"),
		       esdctl_num(g, "late"), esdctl_num(g, "busy"), esdctl_num(g, "gpu_rejected"),
		       esdctl_num(g, "small"), minr, esdctl_num(g, "last_gpu_us"),
		       json_is_true(json_object_get(g, "last_by_gpu")) ? "gpu" : "cpu");
	}
	free_replies(ctl, rep);
	return rc;
}

/* Settings that change decisions are scheduled by PS shard 0 (every node
 * switches at the same iteration); the others are set on each esdd. */
static bool is_ps_setting(const char *key)
{
	static const char *const k[] = {"dispatch.method", "dispatch.alpha", "cache.policy",
					"workers.rates", "method", "alpha", "policy", "rates"};
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++)
		if (!strcmp(key, k[i]))
			return true;
	return false;
}

/* Send req (taken) to target i; its reply or NULL, the worst exit code
 * so far in *worst. */
static json_t *call_taking(const struct esdctl *ctl, int i, json_t *req, int *worst)
{
	json_t *r = NULL;
	int rc = esdctl_call(ctl, i, req, false, &r);
	json_decref(req);
	if (rc > *worst)
		*worst = rc;
	return r;
}

int esdctl_set(const struct esdctl *ctl, const char *key, const char *value)
{
	int worst = 0;
	bool ps_key = is_ps_setting(key);
	json_t *all = json_array();
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = NULL;
		/* one target: it answers (an esdd says where such a key goes);
		 * several: only the daemons of the key's kind */
		if (ctl->ntargets > 1) {
			json_t *st = NULL;
			int rc = esdctl_cmd(ctl, i, "status", false, &st);
			if (rc) {
				worst = rc > worst ? rc : worst;
				continue;
			}
			bool is_ps = !strcmp(esdctl_str(st, "role"), "ps");
			json_decref(st);
			if (is_ps != ps_key)
				continue;
		}
		r = call_taking(
		    ctl, i, json_pack("{s:s, s:s, s:s}", "cmd", "set", "key", key, "value", value),
		    &worst);
		if (!r)
			continue;
		if (!ctl->json && json_object_get(r, "effective_at"))
			printf("%s: %s = %s from iteration %.0f on every node (requested at "
			       "iteration %.0f)\n", ctl->targets[i], esdctl_str(r, "key"),
			       esdctl_str(r, "value"), esdctl_num(r, "effective_at"),
			       esdctl_num(r, "requested_at"));
		else if (!ctl->json)
			printf("%s: %s = %s\n", ctl->targets[i], key, value);
		json_array_append_new(all, r);
	}
	if (ctl->json && json_array_size(all))
		esdctl_print_json(ctl->ntargets == 1 ? json_array_get(all, 0) : all);
	json_decref(all);
	return worst;
}

int esdctl_checkpoint(const struct esdctl *ctl, double wait_s)
{
	int worst = 0;
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = NULL;
		int rc = applies(ctl, i, "checkpoint");
		if (rc == 1)
			continue;
		if (!rc)
			rc = esdctl_cmd(ctl, i, "checkpoint", false, &r);
		if (rc) {
			if (rc > worst)
				worst = rc;
			continue;
		}
		double before = esdctl_num(r, "checkpoints");
		if (wait_s > 0) {
			int64_t end = esd_now_ns() + (int64_t)(wait_s * 1e9);
			bool written = false;
			while (!written && esd_now_ns() < end) {
				json_t *st = NULL;
				if (esdctl_cmd(ctl, i, "status", true, &st))
					break;
				written = esdctl_num(st, "checkpoints") > before;
				if (written) {
					json_object_set_new(
					    r, "written_at",
					    json_integer((json_int_t)esdctl_num(st, "iteration")));
				}
				json_decref(st);
				if (!written)
					nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
			}
			json_object_set_new(r, "written", json_boolean(written));
			if (!written) {
				fprintf(
				    stderr,
				    "esdctl: %s: checkpoint requested at iteration %.0f but not "
				    "written within %.1f s\n",
				    ctl->targets[i], esdctl_num(r, "requested_at"), wait_s);
				worst = worst > ESDCTL_EFAIL ? worst : ESDCTL_EFAIL;
			}
		}
		if (ctl->json)
			esdctl_print_json(r);
		else if (json_is_true(json_object_get(r, "written")))
			printf("%s: checkpoint written at iteration %.0f: %s\n", ctl->targets[i],
			       esdctl_num(r, "written_at"), esdctl_str(r, "path"));
		else
			printf("%s: checkpoint requested at iteration %.0f; it is written at the "
			       "next boundary every daemon flushes at (%s)\n",
			       ctl->targets[i], esdctl_num(r, "requested_at"),
			       esdctl_str(r, "path"));
		json_decref(r);
	}
	return worst;
}

int esdctl_stop(const struct esdctl *ctl)
{
	int worst = 0;
	for (int i = 0; i < ctl->ntargets; i++) {
		json_t *r = NULL;
		int rc = esdctl_cmd(ctl, i, "stop", false, &r);
		if (rc) {
			if (rc > worst)
				worst = rc;
			continue;
		}
		if (ctl->json)
			esdctl_print_json(r);
		else if (esdctl_num(r, "stop_at") > 0)
			printf("%s: the job stops after iteration %.0f\n", ctl->targets[i],
			       esdctl_num(r, "stop_at"));
		else
			printf("%s: stop requested at iteration %.0f: the job stops at the next "
			       "checkpoint boundary, a few iterations on\n",
			       ctl->targets[i], esdctl_num(r, "iteration"));
		json_decref(r);
	}
	return worst;
}
