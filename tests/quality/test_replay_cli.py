"""esd-replay's command line: every mechanism form runs on a small stream,
sizes sum to the global batch (auto, same and lists included), +padded
decides as without model.dims, the three formats agree, and bad input is refused with a message naming it.

usage: test_replay_cli.py BIN_DIR
"""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "testbed"))
from esdcluster import write_ini  # noqa: E402

MECHS = ("job,vanilla,laia@equal,heu,opt,hungarian,hybrid:0.5,opt+shared,laia+ls:300,"
         "esd+,laia@same,opt+shared+ls@auto,heu@20/12/20/12")


def main():
    bin_dir = sys.argv[1]
    root = tempfile.mkdtemp(prefix="esd-replay-cli.")
    fails = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            fails.append(what)

    stream = os.path.join(root, "s.esd")
    subprocess.run([os.path.join(bin_dir, "esd-data"), "gen", "-o", stream, "--shape", "avazu",
                    "-n", "3000", "--scale", "2000", "--max-rows", "500", "--seed", "3"],
                   check=True, stdout=subprocess.DEVNULL)
    ini = os.path.join(root, "job.ini")
    write_ini(ini, {"workers.n": 4, "workers.batch": 16, "workers.rates": "5G,5G,0.5G,0.5G",
                    "workers.compute_ns_per_sample": 1000, "model.dim": 16,
                    "job.iterations": 30, "data.stream": stream, "cache.ratio": 0.1})
    exe = os.path.join(bin_dir, "esd-replay")
    base = [exe, "--config", ini, "--mechanisms", MECHS]
    js = json.loads(subprocess.run(base + ["--format", "json"], stdout=subprocess.PIPE,
                                   text=True, check=True).stdout)
    ms = js["mechanisms"]
    check(len(ms) == len(MECHS.split(",")), "one result per mechanism")
    for m in ms:
        check(sum(m["sizes"]) == 64 and min(m["sizes"]) >= 1,
              "%s: sizes %s sum to k" % (m["mechanism"], m["sizes"]))
        check(m["true_cost_ns"] == sum(m["cost_ns"].values()),
              "%s: true cost is the sum of its kinds" % m["mechanism"])
        check(m["true_cost_ns"] == m["fast_ns"] + m["slow_ns"],
              "%s: true cost is the sum of its link classes" % m["mechanism"])
        check(m["crit_ns"] >= m["crit_xfer_ns"] > 0, "%s: critical path" % m["mechanism"])
    for m in ms:
        ew = m["every_worker"]
        check(all(ew[q]["rows"] * 4 <= m["transfers"][q] for q in ew) and
              sum(ew[q]["cost_ns"] for q in ew) <= m["true_cost_ns"],
              "%s: rows every worker moved are among its transfers" % m["mechanism"])
    byname = {m["mechanism"]: m for m in ms}
    check(byname["laia@same"]["sizes"] == byname["esd+"]["sizes"], "@same copies sizes")
    check(byname["heu@20/12/20/12"]["sizes"] == [20, 12, 20, 12], "explicit size list")
    check(byname["vanilla"]["transfers"]["update_value"] == 0 and byname["vanilla"]["hits"] == 0,
          "vanilla runs full-set sync")
    # the job names no method: the job mechanism is the project's method,
    # its sizes fitted online as the runtime fits them (in a cache with room
    # for unequal sizes: this one holds 16 samples' keys)
    fit = subprocess.run([exe, "--config", ini, "--set", "cache.ratio=0.5", "--mechanisms",
                          "job", "--format", "json"], stdout=subprocess.PIPE, text=True,
                         check=True)
    job = json.loads(fit.stdout)["mechanisms"][0]
    check(job.get("job", "").startswith("opt+shared+ls:2048, fitted online"),
          "job with no dispatch keys: %s" % job.get("job"))
    check(job["sizes"][0] > job["sizes"][2],
          "job: the sizes favour the fast links (the cold prior, then the fit): %s after "
          "%s refits" % (job["sizes"], job.get("refits")))
    # from equal sizes (a size model given: no prior) the fitter switches
    fit = subprocess.run([exe, "--config", ini, "--set", "cache.ratio=0.5", "--set",
                          "workers.size_model=0,0", "--mechanisms", "job", "--format", "json"],
                         stdout=subprocess.PIPE, text=True, check=True)
    job = json.loads(fit.stdout)["mechanisms"][0]
    check(job.get("refits", 0) >= 1 and job["sizes"][0] > job["sizes"][2],
          "job from equal sizes: the sizes were refitted towards the fast links: %s after "
          "%s refits" % (job["sizes"], job.get("refits")))
    check(byname["laia+ls:300"]["ls_swaps"] > 0, "local search takes swaps")
    # model.dims: +padded decides as if every row were full; without
    # model.dims it changes nothing, with it the rows' own bytes move less
    def pad_pair(*sets):
        r = subprocess.run([exe, "--config", ini, *sets, "--mechanisms", "opt,opt+padded",
                            "--format", "json"], stdout=subprocess.PIPE, text=True, check=True)
        return json.loads(r.stdout)["mechanisms"]
    a, b = pad_pair()
    check(a["true_cost_ns"] == b["true_cost_ns"] and a["wire_bytes"] == b["wire_bytes"] ==
          sum(a["transfers"].values()) * 16 + 4 * 16 * (
              2 * (a["transfers"]["update_value"] + a["transfers"]["miss_pull"] +
                   a["transfers"]["evict_push"]) + a["transfers"]["update_grad"]),
          "+padded without model.dims: the same decisions, rows of 16 floats and their state")
    nt = json.loads(subprocess.run([os.path.join(bin_dir, "esd-data"), "stat", stream, "--json"],
                                   stdout=subprocess.PIPE, text=True, check=True).stdout)["ntables"]
    if nt >= 2:
        h = nt // 2
        a, b = pad_pair("--set", "model.dims=4*%d,16*%d" % (h, nt - h))
        check(a["transfers"] != b["transfers"] and a["wire_ns"] != b["wire_ns"],
              "model.dims: rows charged their own bytes are other decisions than rows "
              "charged as full ones (%d vs %d bytes, %d vs %d ns of link time)"
              % (a["wire_bytes"], b["wire_bytes"], a["wire_ns"], b["wire_ns"]))
    else:
        check(False, "esd-data stat: a stream of %d tables" % nt)
    rows = list(csv.DictReader(io.StringIO(subprocess.run(
        base + ["--format", "csv"], stdout=subprocess.PIPE, text=True, check=True).stdout)))
    check([r["mechanism"] for r in rows] == [m["mechanism"] for m in ms] and
          all(int(r["true_cost_ns"]) == m["true_cost_ns"] for r, m in zip(rows, ms)),
          "csv == json")
    table = subprocess.run(base, stdout=subprocess.PIPE, text=True, check=True).stdout
    check(all(m["mechanism"] in table for m in ms), "table lists every mechanism")
    for bad in ("opt+foo", "hybrid:2", "laia@1/2/3", "nope", "laia@0/1/1/1"):
        r = subprocess.run([exe, "--config", ini, "--mechanisms", bad], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        check(r.returncode != 0 and bad in r.stderr, "refused: %s (%s)" % (bad, r.stderr.strip()))
    r = subprocess.run([exe, "--config", os.path.join(root, "missing.ini")],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(r.returncode != 0, "missing config refused")
    if fails:
        print("%d check(s) failed; files kept in %s" % (len(fails), root))
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
