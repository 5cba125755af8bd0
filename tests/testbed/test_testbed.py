#!/usr/bin/env python3
"""test_testbed: esd-testbed at a tiny scale (4 workers, a few iterations).

Checks that the run succeeds, that results.csv, results.json and table.txt
exist and parse, that every mechanism asked for is measured (one that says
it is not available fails the test), and, from the daemons' own summaries of every run
(at the end and at the end of the warm-up), that the rows counted on each link per
transfer kind equal the transfers the snapshots predicted; and that the
reported costs are the link bytes divided by the link rates.

usage: test_testbed.py ESD_TESTBED BIN_DIR [--netns] [--shards S] [--dpdk]
(exit 77: cannot run here)

--dpdk: esdd <-> esd-ps over DPDK (esd-testbed --backend dpdk): net_memif,
or with --netns net_af_packet between the namespaces on one bridge; over
fewer mechanisms.

--netns: the same with the links in network namespaces shaped by tc tbf
(needs root and iproute2), over fewer mechanisms; also checks that every
namespace the testbed made is gone afterwards.
"""
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

KINDS = ("miss_pull", "update_push", "evict_push")
MECHS = "vanilla,het,fae,laia,esd1,esd0.5,esd0,default,laia-same"
MECHS_NS = "vanilla,laia,esd1"
DIRN = {"miss_pull": "rx", "update_push": "tx", "evict_push": "tx"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


r_pid = [0]


def main():
    testbed, bindir = sys.argv[1], sys.argv[2]
    netns = "--netns" in sys.argv[3:]
    few = netns or "--dpdk" in sys.argv[3:]  # fewer mechanisms
    if netns and (os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc")):
        print("SKIP: --netns needs root, ip and tc")
        sys.exit(77)
    for t in ("esdd", "esd-ps", "esd-trainer", "esd-data"):
        if not os.access(os.path.join(bindir, t), os.X_OK):
            print("SKIP: %s not built" % t)
            sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="esd-testbed-test.")
    try:
        out = os.path.join(tmp, "out")
        argv = [sys.executable, testbed, "--bin", bindir, "--out", out, "--data-dir",
                os.path.join(tmp, "data"), "--workers", "4", "--batch", "32", "--dim", "16",
                "--max-rows", "2000", "--warmup", "2", "--iterations", "4", "--compute-ns",
                "1000", "--mem-budget", "2", "--keep-runs", "--quiet", "--run-timeout", "60",
                "--mechanisms", MECHS_NS if few else MECHS]
        if netns:
            argv.append("--netns")
        if "--shards" in sys.argv[3:]:  # several PS shards: the same checks hold
            argv += ["--shards", sys.argv[sys.argv.index("--shards") + 1]]
        if "--dpdk" in sys.argv[3:]:  # the rows over memif or af_packet: the same checks
            argv += ["--backend", "dpdk"]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        r_pid[0] = p.pid
        try:
            outtext, _ = p.communicate(timeout=85)
        except subprocess.TimeoutExpired:
            p.terminate()  # the testbed stops everything it started on SIGTERM
            outtext, _ = p.communicate(timeout=20)
            print(outtext)
            fail("esd-testbed still running after 85 s")
        r = subprocess.CompletedProcess(argv, p.returncode, outtext)
        print(r.stdout)
        if r.returncode:
            for lf in sorted(glob.glob(os.path.join(out, "runs", "*", "*.log"))):
                with open(lf, errors="replace") as f:
                    tail = f.read()[-1500:]
                if "--dpdk" in sys.argv[3:] and ("not built" in tail or "EAL" in tail):
                    print("SKIP: dpdk cannot run here: %s" % tail.strip().splitlines()[-1])
                    sys.exit(77)
                if tail.strip():
                    print("---- %s (tail)\n%s" % (os.path.relpath(lf, out), tail))
            fail("esd-testbed exited with %d" % r.returncode)
        for f in ("results.csv", "results.json", "table.txt"):
            if not os.path.getsize(os.path.join(out, f)):
                fail(f + " is empty")
        with open(os.path.join(out, "results.json")) as f:
            res = json.load(f)
        with open(os.path.join(out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        names = [x["mechanism"] for x in res["results"]]
        if names != [x["mechanism"] for x in rows]:
            fail("CSV and JSON list different mechanisms")
        want = (MECHS_NS if few else MECHS).split(",")
        if names != want:
            fail("unexpected mechanisms %s" % names)
        measured = 0
        for x in res["results"]:
            # every mechanism asked for can run here: one that reports
            # itself not available is a failure, not a skip
            if not x["available"]:
                fail("%s not available: %s" % (x["mechanism"], x.get("why") or "no reason given"))
            measured += 1
            if not x["links_equal_prediction"]:
                fail("%s: links differ from the prediction: %s" % (x["mechanism"],
                                                                   x["mismatches"]))
            if x["iterations"] != 4 or x["iters_per_s"] <= 0:
                fail("%s: bad iterations or rate" % x["mechanism"])
            # costs are link bytes / link rate, summed over workers and kinds
            c = sum(p[k + "_bytes"] * 8.0 / p["rate_bps"] for p in x["per_worker"]
                    for k in KINDS)
            if abs(c - x["cost_s"]) > 1e-9 * max(1.0, c):
                fail("%s: cost %g != bytes / rate %g" % (x["mechanism"], x["cost_s"], c))
            parts = x["cost_miss_pull_s"] + x["cost_update_push_s"] + x["cost_evict_push_s"]
            if abs(parts - x["cost_s"]) > 1e-9 * max(1.0, c):
                fail("%s: the composition does not add up" % x["mechanism"])
            if abs(x["cost_fast_s"] + x["cost_slow_s"] - x["cost_s"]) > 1e-9 * max(1.0, c):
                fail("%s: the link classes do not add up" % x["mechanism"])
            if not 0 <= x["hit_ratio"] <= 1:
                fail("%s: hit ratio %g" % (x["mechanism"], x["hit_ratio"]))
        if measured != len(want):
            fail("only %d of %d mechanisms measured" % (measured, len(want)))
        # the daemons' own summaries, independently of the testbed's arithmetic
        sums = glob.glob(os.path.join(out, "runs", "*", "summary*.json"))
        if len(sums) != 4 * len(want):
            fail("expected the summaries of every run, found %d" % len(sums))
        for p in sums:
            with open(p) as f:
                sm = json.load(f)
            if sm["status"] != 0:
                fail("%s: status %d" % (p, sm["status"]))
            if sm.get("at_warmup", {}).get("iterations") != 2:
                fail("%s: no counters at the end of the warm-up: %s" % (p, sm.get("at_warmup")))
            for part in (sm, sm["at_warmup"]):
                for k in KINDS:
                    got = sum(l[k][DIRN[k] + "_rows"] for l in part["links"])
                    if got != part["predicted"][k]:
                        fail("%s: %s counted %d on the links, %d predicted"
                             % (p, k, got, part["predicted"][k]))
        res_by = {x["mechanism"]: x for x in res["results"]}
        if not few:
            d, ls = res_by["default"], res_by["laia-same"]
            if ls["final_batch"] != d["final_batch"] or ls["method"] != "laia":
                fail("laia-same did not run LAIA on the default's sizes: %s, %s"
                     % (ls["final_batch"], d["final_batch"]))
            if d["method"] is not None:
                fail("the default set a dispatch key: %s" % d["method"])
        with open(os.path.join(out, "table.txt")) as f:
            table = f.read()
        if "x model" not in table or (not few and "default   = " not in table):
            fail("the table lacks the modelled ratio or the default's line:\n" + table)
        if netns:
            left = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                                  text=True).stdout
            if "esdtb%d" % (r_pid[0] % 100000) in left:
                fail("namespaces left behind: %s" % left)
        print("ok: %d mechanisms measured, %d summaries agree with their predictions"
              % (measured, len(sums)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
