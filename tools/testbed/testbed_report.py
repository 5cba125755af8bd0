"""The mechanisms esd-testbed compares, and its report.

A mechanism's job settings (mech_settings), its row of results from the
daemons' summaries of one run (links_of, minus, aggregate), and the report
of all rows: the table on the terminal, CSV, JSON and gnuplot PNGs
(report). esd-testbed runs the cluster and imports this module.

Standard library only (any python3).
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import time

# The project's default (docs/quality.md): what a job that names no
# dispatch method runs, so the "default" mechanism sets no dispatch key at
# all. The runtime fits the sizes online (workers.split = fit).
PROJECT_DEFAULT = {"name": "opt+shared+ls:2048, sizes fitted online",
                   "note": "the runtime's default: opt on the shared-charge matrix, 2048 "
                           "local-search swaps, link-aware sizes fitted online"}


KINDS = ("miss_pull", "update_push", "evict_push")
# which direction a kind travels on the worker's link
KIND_DIR = {"miss_pull": "rx", "update_push": "tx", "evict_push": "tx"}


ALL_MECHS = ["vanilla", "het", "fae", "laia", "esd1", "esd0.5", "esd0.25", "esd0", "default",
             "laia-same"]
# --quick, the main job: where the links set the pace on a small machine
QUICK_MECHS = ["vanilla", "laia", "esd1", "default", "laia-same"]


def log(msg):
    print(msg, flush=True)


# ---- the mechanisms -------------------------------------------------------------------

def mech_settings(name, args):
    """Job settings of a mechanism, or (None, why) when not available."""
    if name == "vanilla":
        return {"dispatch.method": "vanilla", "dispatch.sync": "full-set"}, None
    if name == "het":
        # HET: full-set sync where a copy at most 'staleness' versions old is
        # used without a pull (docs/runtime.md); 0 is plain full-set
        return {"dispatch.method": "vanilla", "dispatch.sync": "het",
                "dispatch.staleness": args.het_staleness}, None
    if name == "fae":
        # FAE: a static hot set profiled from the stream before training
        # (esd-data hot), held by every worker and all-reduced through the
        # PS every iteration; cold rows pulled and pushed on use (full-set)
        return {"dispatch.method": "vanilla", "dispatch.sync": "full-set",
                "fae_hot": True}, None
    if name == "laia":
        return {"dispatch.method": "laia", "dispatch.sync": "on-demand"}, None
    if name.startswith("esd"):
        try:
            a = float(name[3:])
        except ValueError:
            return None, "unknown mechanism"
        if not 0 <= a <= 1:
            return None, "alpha must be in 0..1"
        return {"dispatch.method": "hybrid", "dispatch.alpha": a,
                "dispatch.sync": "on-demand"}, None
    if name == "default":
        return {}, None  # no dispatch key: the runtime's own default
    if name == "laia-same":
        # LAIA given the default's sizes: what the sizes give, apart from
        # what the decision gives
        return {"dispatch.method": "laia", "dispatch.sync": "on-demand",
                "default_sizes": True}, None
    if name.startswith("hybrid:") or name.startswith("opt") or name.startswith("heu") \
            or name.startswith("hungarian"):
        # extra methods by name: METHOD[:ALPHA]
        meth, _, a = name.partition(":")
        s = {"dispatch.method": meth, "dispatch.sync": "on-demand"}
        if a:
            try:
                s["dispatch.alpha"] = float(a)
            except ValueError:
                return None, "unknown mechanism: alpha '%s' is not a number" % a
        return s, None
    return None, "unknown mechanism (known: %s, or METHOD[:ALPHA])" % ", ".join(ALL_MECHS)


def parse_rate(s):
    s = str(s).strip()
    mult = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
    if s and s[-1] in mult:
        return float(s[:-1]) * mult[s[-1]]
    return float(s)


# ---- a mechanism's row, from the daemons' summaries --------------------------------

def links_of(summaries, rates):
    """Per worker: rows and bytes per kind on its links (all shards)."""
    out = []
    for sm in summaries:
        w = sm["rank"]
        d = {"rank": w, "rate_bps": rates[w]}
        for k in KINDS:
            rows = byts = 0
            for l in sm["links"]:
                rows += l[k][KIND_DIR[k] + "_rows"]
                byts += l[k][KIND_DIR[k] + "_bytes"]
            d[k + "_rows"], d[k + "_bytes"] = rows, byts
            d[k + "_pred"] = sm["predicted"][k]
        d["cache"] = dict(sm["cache"])
        d["seconds"] = sm["seconds"]
        d["iterations"] = sm["iterations"]
        d["decision_steps"] = sm["decision"]["steps"]
        d["decision_ms_sum"] = sm["decision"]["ms_mean"] * sm["decision"]["steps"]
        d["order_wait_ms"] = sm["decision"].get("order_wait_ms")  # None: an older esdd
        out.append(d)
    return out


def minus(full, warm):
    """Per-worker counters of the measured iterations: the run's - those at the
    end of the warm-up."""
    out = []
    for f, w in zip(full, warm):
        d = {}
        for k, v in f.items():
            if isinstance(v, dict):
                d[k] = {kk: v[kk] - w[k][kk] for kk in v}
            elif k in ("rank", "rate_bps") or v is None or w.get(k) is None:
                d[k] = v if k in ("rank", "rate_bps") else None
            else:
                d[k] = v - w[k]
        out.append(d)
    return out


def aggregate(name, settings, per, rates, measured_iters, seconds, args, check):
    fastest = max(rates)
    r = {"mechanism": name, "method": settings.get("dispatch.method"),
         "alpha": settings.get("dispatch.alpha", ""), "sync": settings.get("dispatch.sync"),
         "iterations": measured_iters, "available": True}
    cost = {k: 0.0 for k in KINDS}
    cls = {"fast": 0.0, "slow": 0.0}
    cls_kind = {c + "_" + k: 0.0 for c in ("fast", "slow") for k in KINDS}
    rows = {k: 0 for k in KINDS}
    hits = lookups = 0
    for p in per:
        rate = p["rate_bps"]
        c = "fast" if rate >= fastest else "slow"
        for k in KINDS:
            t = p[k + "_bytes"] * 8.0 / rate if rate else 0.0
            cost[k] += t
            cls[c] += t
            cls_kind[c + "_" + k] += t
            rows[k] += p[k + "_rows"]
        hits += p["cache"]["hits"]
        lookups += p["cache"]["hits"] + p["cache"]["miss_absent"] + p["cache"]["miss_outdated"]
    r["cost_s"] = sum(cost.values())
    for k in KINDS:
        r["cost_" + k + "_s"] = cost[k]
        r["rows_" + k] = rows[k]
    r["cost_fast_s"], r["cost_slow_s"] = cls["fast"], cls["slow"]
    for k, v in cls_kind.items():
        r["cost_" + k + "_s"] = v
    r["cost_per_iter_ms"] = r["cost_s"] * 1e3 / measured_iters if measured_iters else 0
    r["hit_ratio"] = hits / lookups if lookups else 0.0
    r["iters_per_s"] = measured_iters / seconds if seconds > 0 else 0.0
    steps = sum(p["decision_steps"] for p in per)
    r["decision_ms"] = sum(p["decision_ms_sum"] for p in per) / steps if steps else 0.0
    # the node that waited longest for its work orders, ms per iteration:
    # decisions (or node 0's orders, with one decider) not ready in time
    waits = [p.get("order_wait_ms") for p in per]
    r["order_wait_ms"] = (max(waits) / measured_iters
                          if waits and None not in waits and measured_iters else None)
    r["links_equal_prediction"] = check
    return r


def node_cpu_phases(summaries, iters):
    """The daemons' own CPU counters (summary "cpu", less "at_warmup"'s),
    summed over the nodes, ms per measured iteration; None without them."""
    out = {}
    for sm in summaries:
        cpu = sm.get("cpu")
        if not isinstance(cpu, dict) or not iters:
            return None
        warm = (sm.get("at_warmup") or {}).get("cpu") or {}
        for k, v in cpu.items():
            out[k] = out.get(k, 0.0) + (v - warm.get(k, 0.0)) / iters
    return out


def model_iteration_ms(args, per, batch, iters):
    """The modelled iteration: the slowest worker's compute (the emulated
    time per sample x its samples) plus its link time (its bytes / its
    rate), per measured iteration."""
    c = 0 if args.real_model else args.compute_ns
    worst = 0.0
    for p in per:
        rate = p["rate_bps"]
        link = sum(p[k + "_bytes"] * 8.0 / rate for k in KINDS) if rate else 0.0
        m = batch[p["rank"]] if batch and p["rank"] < len(batch) else args.batch
        worst = max(worst, c * 1e-9 * m + link / (iters or 1))
    return 1e3 * worst


# ---- output -------------------------------------------------------------------------

COLS = ["mechanism", "method", "alpha", "sync", "iterations", "cost_s", "cost_per_iter_ms",
        "cost_miss_pull_s", "cost_update_push_s", "cost_evict_push_s", "cost_fast_s",
        "cost_slow_s", "cost_fast_miss_pull_s", "cost_fast_update_push_s",
        "cost_fast_evict_push_s", "cost_slow_miss_pull_s", "cost_slow_update_push_s",
        "cost_slow_evict_push_s", "rows_miss_pull", "rows_update_push", "rows_evict_push",
        "hit_ratio", "iters_per_s", "decision_ms", "speedup_vs_laia",
        "model_ms_per_iter", "model_speedup_vs_laia", "cpu_ms_per_iter",
        "machine_cpu_ms_per_iter",
        "cost_reduction_vs_laia", "links_equal_prediction", "rate_source",
        "iters_per_s_subtracted", "available", "why"]


def add_ratios(results):
    ref = next((r for r in results if r["mechanism"] == "laia" and r["available"]), None)
    for r in results:
        if not r.get("available") or not ref:
            continue
        r["speedup_vs_laia"] = r["iters_per_s"] / ref["iters_per_s"] if ref["iters_per_s"] else 0
        if r.get("model_ms_per_iter"):
            r["model_speedup_vs_laia"] = ref["model_ms_per_iter"] / r["model_ms_per_iter"]
        r["cost_reduction_vs_laia"] = ((ref["cost_s"] - r["cost_s"]) / ref["cost_s"]
                                       if ref["cost_s"] else 0)


def print_table(results, out=sys.stdout):
    hdr = ("%-9s %9s %6s %6s %6s  %8s %8s  %6s %7s %6s %7s %8s %8s %5s"
           % ("mechanism", "cost/it", "miss%", "upd%", "evict%", "fast/it", "slow/it", "hit%",
              "it/s", "x LAIA", "x model", "-cost%", "dec ms", "check"))
    out.write(hdr + "\n" + "-" * len(hdr) + "\n")
    for r in results:
        if not r.get("available"):
            out.write("%-9s not available: %s\n" % (r["mechanism"], r["why"]))
            continue
        c = r["cost_s"] or 1
        n = r["iterations"] or 1
        out.write("%-9s %7.1fms %5.1f%% %5.1f%% %5.1f%%  %6.1fms %6.1fms  %5.1f%% %7.2f %6s %7s "
                  "%8s %8.2f %5s\n"
                  % (r["mechanism"], r["cost_per_iter_ms"], 100 * r["cost_miss_pull_s"] / c,
                     100 * r["cost_update_push_s"] / c, 100 * r["cost_evict_push_s"] / c,
                     1e3 * r["cost_fast_s"] / n, 1e3 * r["cost_slow_s"] / n,
                     100 * r["hit_ratio"], r["iters_per_s"],
                     "%.2fx" % r["speedup_vs_laia"] if "speedup_vs_laia" in r else "-",
                     "%.2fx" % r["model_speedup_vs_laia"] if "model_speedup_vs_laia" in r
                     else "-",
                     "%.1f%%" % (100 * r["cost_reduction_vs_laia"])
                     if "cost_reduction_vs_laia" in r else "-",
                     r["decision_ms"], "ok" if r["links_equal_prediction"] else "FAIL"))
    for r in results:
        if not r.get("available"):
            continue
        sizes = sizes_text(r.get("final_batch"))
        if r["mechanism"] == "default":
            out.write("default   = %s (no dispatch key): ended at sizes %s\n"
                      % (PROJECT_DEFAULT["name"], sizes))
        elif r["mechanism"] == "laia-same":
            out.write("laia-same = LAIA given the default's sizes %s\n" % sizes)
    out.write("x LAIA: measured iterations/s over LAIA's; x model: LAIA's modelled iteration "
              "(slowest worker's compute + link time) over this one's\n")
    cores = os.cpu_count() or 1
    for r in results:
        cpu, model = r.get("cpu_ms_per_iter"), r.get("model_ms_per_iter")
        other = (r.get("machine_cpu_ms_per_iter") or 0) - (cpu or 0)
        if not r.get("available") or not cpu or not model:
            continue
        if (cpu + max(other, 0)) / cores > model:
            out.write("warning: %s: its processes took %.1f ms of CPU per iteration and other "
                      "work on this machine %.1f ms, more than %d cores give in its modelled "
                      "%.1f ms iteration: the CPU, not the links, set its pace\n"
                      % (r["mechanism"], cpu, max(other, 0), cores, model))
    print_cpu(results, out)
    out.flush()


NODE_PHASES = [("decision_ms", "decide"), ("cache_ms", "cache"), ("encode_ms", "encode"),
               ("decode_ms", "decode"), ("send_receive_ms", "s/r"), ("auth_ms", "auth"),
               ("optimizer_ms", "optim"), ("trainer_ms", "train"), ("other_ms", "other")]


PS_PHASES = [("receive_ms", "recv"), ("send_ms", "send"), ("pull_ms", "pull"),
             ("push_ms", "push"), ("barrier_ms", "barrier"), ("auth_ms", "auth"),
             ("other_ms", "other")]


def print_cpu(results, out):
    """CPU per measured iteration: per process kind (the processes' threads,
    /proc), and per phase from the daemons' and the shards' own counters
    (all nodes, all shards)."""
    rows = [r for r in results if r.get("available") and r.get("cpu_ms_per_iter_kind")]
    if not rows:
        return
    out.write("\nCPU ms per iteration, all processes of a kind (/proc):\n")
    out.write("%-9s %8s %8s %8s %8s\n" % ("mechanism", "all", "esdd", "esd-ps", "trainer"))
    for r in rows:
        k = r["cpu_ms_per_iter_kind"]
        out.write("%-9s %8.1f %8.1f %8.1f %8.1f\n"
                  % (r["mechanism"], sum(k.values()), k.get("esdd", 0), k.get("esd-ps", 0),
                     k.get("trainer", 0)))
    out.write("CPU ms per iteration by phase (the daemons' and shards' counters, summed):\n")
    out.write("%-9s esdd:%s | esd-ps:%s\n"
              % ("mechanism", "".join("%7s" % n for _, n in NODE_PHASES),
                 "".join("%8s" % n for _, n in PS_PHASES)))
    for r in rows:
        nd = r.get("cpu_ms_per_iter_node_phases") or {}
        ps = r.get("cpu_ms_per_iter_ps_phases") or {}
        out.write("%-9s     %s |        %s\n"
                  % (r["mechanism"],
                     "".join("%7.1f" % nd[k] if k in nd else "%7s" % "-" for k, _ in NODE_PHASES),
                     "".join("%8.1f" % ps[k] if k in ps else "%8s" % "-" for k, _ in PS_PHASES)))


def sizes_text(batch):
    """Sizes as runs: 222x4/34x4."""
    if not batch:
        return "?"
    runs, prev, cnt = [], None, 0
    for b in batch + [None]:
        if b == prev:
            cnt += 1
            continue
        if prev is not None:
            runs.append("%d%s" % (prev, "x%d" % cnt if cnt > 1 else ""))
        prev, cnt = b, 1
    return "/".join(runs)


def write_csv(path, results):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLS)
        for r in results:
            w.writerow([("%.6g" % r[c]) if isinstance(r.get(c), float) else r.get(c, "")
                        for c in COLS])


def gnuplot_plots(outdir, results, title):
    gp = shutil.which("gnuplot")
    ok = [r for r in results if r.get("available")]
    if not gp or not ok:
        return [], "gnuplot not found" if not gp else "no results"
    dat = os.path.join(outdir, "plot.dat")
    with open(dat, "w") as f:
        f.write("# mech miss upd evict fast slow hit itps dec\n")
        for r in ok:
            n = r["iterations"] or 1
            f.write("%s %g %g %g %g %g %g %g %g\n" % (
                r["mechanism"], r["cost_miss_pull_s"] * 1e3 / n, r["cost_update_push_s"] * 1e3 / n,
                r["cost_evict_push_s"] * 1e3 / n, r["cost_fast_s"] * 1e3 / n,
                r["cost_slow_s"] * 1e3 / n, 100 * r["hit_ratio"], r["iters_per_s"],
                r["decision_ms"]))
    pngs = {k: os.path.join(outdir, k + ".png") for k in ("cost", "cost_links", "throughput",
                                                           "hit_ratio")}
    script = """
set terminal pngcairo size 900,500 font ",10"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid ytics
set key outside right top
set xtics rotate by -30
set yrange [0:*]
set offsets 0, 0, graph 0.08, 0
set output '{cost}'
set title '{t}: transmission cost per iteration by kind'
set ylabel 'ms per iteration (sum over links)'
set style histogram rowstacked
plot '{dat}' using 2:xtic(1) title 'miss pull', '' using 3 title 'update push', '' using 4 title 'evict push'
set output '{cost_links}'
set title '{t}: transmission cost per iteration by link class'
plot '{dat}' using 5:xtic(1) title 'fast links', '' using 6 title 'slow links'
set style histogram clustered
set output '{throughput}'
set title '{t}: iterations per second (warm-up excluded)'
set ylabel 'iterations / s'
plot '{dat}' using 8:xtic(1) title 'it/s'
set output '{hit_ratio}'
set title '{t}: hit ratio'
set ylabel 'hit ratio (%)'
plot '{dat}' using 7:xtic(1) title 'hit ratio'
""".format(dat=dat, t=title.replace("'", ""), **pngs)
    r = subprocess.run([gp], input=script, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if r.returncode:
        return [], "gnuplot failed: " + r.stdout.strip()[:300]
    return [p for p in pngs.values() if os.path.exists(p)], None


def report(args, results, path, rows_total, notes, mp, plan_src, t0):
    log("\nall mechanisms in %.0f s; cost = sum over transfers of bytes / link rate "
        "(measured iterations, all links)\n" % (time.time() - t0))
    print_table(results)
    if args.estimate_rates:
        log("\nlink rates (Mbit/s): the links %s; the model at the start %s"
            % ([round(parse_rate(x) / 1e6, 1) for x in args.rates],
               [round(parse_rate(x) / 1e6, 1) for x in (args.model_rates or args.rates)]))
        for r in results:
            if r.get("available") and "rate_estimates" in r:
                log("  %-9s measured %s, reports %s; model at the end %s, sizes %s"
                    % (r["mechanism"], [round(x / 1e6, 1) for x in r["rate_estimates"]],
                       r["rate_reports"],
                       [round(x / 1e6, 1) for x in r["final_model_rates"] or []],
                       r["final_batch"]))
    meta = {"workers": args.workers, "rates": args.rates, "batch": args.batch, "dim": args.dim,
            "cache_ratio": args.cache_ratio, "policy": args.policy, "optimizer": args.optimizer,
            "shape": args.shape, "stream": path, "rows_total": rows_total,
            "scale": args.scale, "max_rows": args.max_rows, "zipf": args.zipf,
            "rate_scale": args.rate_scale, "model_rates": args.model_rates,
            "estimate_rates": args.estimate_rates,
            "warmup": args.warmup, "iterations": args.iterations,
            "compute_ns_per_sample": None if args.real_model else args.compute_ns,
            "seed": args.seed, "scaling_notes": notes, "plan": mp, "plan_source": plan_src,
            "project_default": PROJECT_DEFAULT,
            "cores": os.cpu_count(),
            "shaping": "tc tbf in network namespaces" if args.netns else "token buckets (transport)",
            "warmup_method": ("counters: the daemons' at the end minus at the end of the "
                              "warm-up; iterations/s: the measured window timed on the "
                              "control socket")
            if args.warmup else "none"}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"setup": meta, "results": results}, f, indent=1)
    write_csv(os.path.join(args.out, "results.csv"), results)
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        print_table(results, f)
    pngs = []
    if not args.no_plots:
        pngs, why = gnuplot_plots(args.out, results, args.title or
                                  "%s, n=%d, m=%d" % (args.shape, args.workers, args.batch))
        if why:
            log("plots: none (%s)" % why)
    latest = os.path.join(os.path.dirname(os.path.abspath(args.out)), "latest")
    try:  # build/testbed/latest -> the newest output folder
        if os.path.islink(latest):
            os.unlink(latest)
        if not os.path.exists(latest):
            os.symlink(os.path.basename(os.path.abspath(args.out)), latest)
    except OSError:
        pass
    log("\nresults: %s/results.csv, results.json, table.txt" % args.out)
    if pngs:
        log("plots:   %s" % ", ".join(pngs))
    bad = [r["mechanism"] for r in results if r.get("available")
           and not r["links_equal_prediction"]]
    if bad:
        log("ERROR: transfers counted on the links differ from the snapshot prediction for: "
            + ", ".join(bad))
        return 1
    return 0
