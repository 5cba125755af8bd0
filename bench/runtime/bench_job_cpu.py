#!/usr/bin/env python3
"""CPU per iteration of the main job's default row, against a baseline
build measured in the same run.

    python3 bench/runtime/bench_job_cpu.py --baseline-bin OTHER/build/bin
        [--bin build/bin] [--repeat 3] [--mechanism default]
        [--baseline-set KEY=VALUE] [-- TESTBED ARGS]

Runs tools/testbed/esd-testbed --quick --mechanisms default (the main job's
default row: 8 workers, emulated compute, links set by token buckets) once
with each set of binaries, the two alternating, --repeat times, on the same
stream. Prints per build the median over the repeats of the CPU per
measured iteration of all the job's processes and per process kind (esdd,
esd-ps, trainer: every thread's scheduler run time, as the testbed
measures it), the median iterations/s, and the ratio of this build's
figure over the baseline's. Where a build exports the per-phase counters
(docs/runtime.md, Accounting) their medians are printed too. Arguments
after -- go to the testbed (e.g. -- --workers 4); --baseline-set gives the
baseline's runs a job setting of their own (the testbed's --set), e.g. the
same build with dispatch.every_node = yes. A baseline is e.g. the
previous commit built in a second tree:

    git archive HEAD~1 | tar -x -C /tmp/base && cmake -S /tmp/base -B /tmp/base/build
    cmake --build /tmp/base/build --target esd-ps esdd esd-trainer esd-data esdctl

Standard library only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TESTBED = os.path.join(REPO, "tools", "testbed", "esd-testbed")
KINDS = ("esdd", "esd-ps", "trainer")


def run_testbed(bin_dir, out, args, extra):
    argv = [sys.executable, TESTBED, "--quick", "--mechanisms", args.mechanism, "--bin",
            bin_dir, "--out", out, "--data-dir", args.data_dir, "--no-plots", "--quiet"]
    r = subprocess.run(argv + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode:
        sys.exit("bench_job_cpu: esd-testbed with %s failed:\n%s" % (bin_dir, r.stdout[-3000:]))
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)["results"]
    row = next((x for x in res if x["mechanism"] == args.mechanism), None)
    if not row or not row.get("available") or "cpu_ms_per_iter_kind" not in row:
        sys.exit("bench_job_cpu: no CPU figures for %s in %s" % (args.mechanism, out))
    kinds = row["cpu_ms_per_iter_kind"]
    fig = {"all": sum(kinds.values()), "it/s": row["iters_per_s"],
           "check": row.get("links_equal_prediction"),
           "order wait (max node)": row.get("order_wait_ms")}
    for k in KINDS:
        fig[k] = kinds.get(k, 0.0)
    for src, pre in (("cpu_ms_per_iter_node_phases", "esdd."),
                     ("cpu_ms_per_iter_ps_phases", "esd-ps.")):
        for k, v in (row.get(src) or {}).items():
            fig[pre + k.replace("_ms", "")] = v
    return fig


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-bin", required=True, help="the baseline build's bin folder")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mechanism", default="default")
    ap.add_argument("--data-dir", default=os.path.join(REPO, "build", "testbed", "data"))
    ap.add_argument("--keep", action="store_true", help="keep the testbed's output folders")
    ap.add_argument("--baseline-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a job setting for the baseline's runs only (e.g. "
                    "dispatch.every_node=yes with --baseline-bin build/bin: the same build "
                    "with a decision on every node)")
    args = ap.parse_args(argv)
    for b in (args.bin, args.baseline_bin):
        if not os.access(os.path.join(b, "esdd"), os.X_OK):
            sys.exit("bench_job_cpu: no esdd in %s: build it first" % b)
    root = tempfile.mkdtemp(prefix="esd-bench-cpu.")
    runs = {"baseline": [], "this": []}
    bins = {"baseline": args.baseline_bin, "this": args.bin}
    for rep in range(args.repeat):
        # alternate which goes first, so that drifting load on a shared
        # machine weighs on both alike
        order = ("baseline", "this") if rep % 2 == 0 else ("this", "baseline")
        for name in order:
            own = [a for kv in args.baseline_set for a in ("--set", kv)] \
                if name == "baseline" else []
            fig = run_testbed(bins[name], os.path.join(root, "%s-%d" % (name, rep)), args,
                              extra + own)
            runs[name].append(fig)
            print("run %d %-8s CPU %6.1f ms/it (esdd %.1f, esd-ps %.1f, trainer %.1f), "
                  "%.2f it/s, links %s" % (rep + 1, name, fig["all"], fig["esdd"],
                                           fig["esd-ps"], fig["trainer"], fig["it/s"],
                                           "ok" if fig["check"] else "FAIL"), flush=True)
    print("\nmedians of %d runs, %s row (esd-testbed --quick), CPU ms per measured iteration"
          % (args.repeat, args.mechanism))
    print("%-22s %10s %10s %8s" % ("", "baseline", "this", "ratio"))
    keys = ["all"] + list(KINDS) + ["it/s", "order wait (max node)"]
    phases = sorted({k for r in runs["this"] for k in r if "." in k})
    for k in keys + phases:
        b, t = med(runs["baseline"], k), med(runs["this"], k)
        if t is None:
            continue
        print("%-22s %10s %10.1f %8s" % (k, "%.1f" % b if b is not None else "-", t,
                                         "%.2fx" % (t / b) if b else "-"))
    bad = [n for n, rs in runs.items() for r in rs if not r["check"]]
    if not args.keep:
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    else:
        print("output folders: %s" % root)
    if bad:
        print("ERROR: links differ from the prediction in runs of: %s" % ", ".join(set(bad)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
