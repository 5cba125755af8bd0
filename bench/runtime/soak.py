#!/usr/bin/env python3
"""Soak: resident memory of esd-ps and esdd over a long job.

    python3 bench/runtime/soak.py build/bin [--iterations 20000] [--shards 2]
        [--workers 2] [--batch 64] [--dim 32] [--tolerance 0.10]
        [--set section.key=value]... [--work DIR] [--keep]

Runs a local job (--shards esd-ps, --workers esdd, one esd-trainer each
with no compute, so the runtime alone sets the pace) on a small model (a
synthetic criteo-kaggle stream of about 2,300 rows; dim 32 with adagrad,
about 600 KB), and reads VmRSS of every esd-ps and esdd from /proc at
start (after warm-up: 5 % of the iterations), middle (50 %) and end (the
last reading of every process before the job finishes); the peak is the
highest reading of any poll. Prints a table and end/start per process, and
exits 1 if any ratio exceeds 1 + tolerance, 2 if the job failed. Not a CI
test (bench/results/soak.md has the figures). Every process it starts is
stopped by its PID (tools/testbed/esdcluster.py). Standard library only.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "testbed"))
from esdcluster import Cluster, ClusterError  # noqa: E402

POINTS = (("start", 0.05), ("middle", 0.50), ("end", None))


def gen_stream(bin_dir, path):
    subprocess.run([os.path.join(bin_dir, "esd-data"), "gen", "-o", path, "--shape",
                    "criteo-kaggle", "-n", "20000", "--scale", "10000", "--max-rows", "500",
                    "--seed", "3"], check=True, stdout=subprocess.DEVNULL)


def vm_rss_kb(pid):
    """VmRSS of a live process in KiB, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def ps_iteration(bin_dir, sock):
    """Shard 0's iteration from `esdctl status`, or None when it does not answer."""
    try:
        out = subprocess.run([os.path.join(bin_dir, "esdctl"), "--socket", sock, "status"],
                             capture_output=True, text=True, timeout=5).stdout
    except subprocess.TimeoutExpired:
        return None
    head = None
    for line in out.splitlines():
        cols = line.split()
        if cols[:1] == ["PS"] and "ITERATION" in cols:
            head = cols.index("ITERATION")
        elif head is not None and cols[:1] == ["esd-ps"] and len(cols) > head:
            try:
                return int(cols[head])
            except ValueError:
                return None
    return None


def watched(cluster):
    """{name: pid} of the esd-ps and esdd processes still running."""
    return {n: p.pid for n, p in cluster.procs.items()
            if (n.startswith("ps") or n.startswith("esdd")) and p.poll() is None}


def sample(cluster):
    out = {}
    for name, pid in watched(cluster).items():
        kb = vm_rss_kb(pid)
        if kb is not None:
            out[name] = kb
    return out


def run(args, stream, work):
    s = {"workers.n": args.workers, "workers.batch": args.batch // args.workers,
         "model.dim": args.dim, "model.hidden": 16, "model.optimizer": "adagrad",
         "job.iterations": args.iterations, "job.warmup": 0, "data.stream": stream,
         "cache.ratio": 0.08, "dispatch.method": "hybrid"}
    for kv in args.set:
        key, _, value = kv.partition("=")
        s[key] = value
    marks = {name: int(args.iterations * f) for name, f in POINTS if f is not None}
    got, peak, last = {}, {}, None
    with Cluster(args.bin, work, s, emulate_ns=0, shards=args.shards) as c:
        c.start()
        sock = os.path.join(work, "ps0.sock")
        t0 = time.time()
        while c.procs["esdd0"].poll() is None:
            it = ps_iteration(args.bin, sock)
            rss = sample(c)
            for name, kb in rss.items():
                peak[name] = max(peak.get(name, 0), kb)
            if it is not None:
                for point, at in marks.items():
                    if point not in got and it >= at:
                        got[point] = (it, rss)
                if "middle" in got and it > got["middle"][0] and \
                        set(rss) == set(got["start"][1]):
                    last = (it, rss)  # the latest reading of every process wins
            if time.time() - t0 > args.timeout:
                raise ClusterError("job still running after %d s" % args.timeout)
            time.sleep(args.poll)
        c.wait(timeout=120)
        secs = time.time() - t0
    if last:
        got["end"] = last
    return got, peak, secs


def report(args, got, peak, secs):
    missing = [p for p, _ in POINTS if p not in got]
    if missing:
        print("soak: no reading at %s (the job ran too fast for --poll %.2f s?)"
              % (", ".join(missing), args.poll))
        return 2
    names = sorted(got["start"][1])
    print("soak: %d iterations, %d workers, %d shard(s), global batch %d, dim %d; %.1f s "
          "(%.0f it/s)" % (args.iterations, args.workers, args.shards, args.batch, args.dim,
                           secs, args.iterations / secs))
    print("%-8s %12s %12s %12s %12s %9s" % ("process", "start MiB", "middle MiB", "end MiB",
                                            "peak MiB", "end/start"))
    print("%-8s %12s %12s %12s %12s" % ("(at it.)", got["start"][0], got["middle"][0],
                                        got["end"][0], ""))
    worst = 0.0
    for n in names:
        a, m, e = (got[p][1].get(n) for p, _ in POINTS)
        if a is None or m is None or e is None:
            print("%-8s gone before the end" % n)
            return 2
        r = e / a
        worst = max(worst, r)
        print("%-8s %12.1f %12.1f %12.1f %12.1f %8.3fx" % (n, a / 1024, m / 1024, e / 1024,
                                                         peak.get(n, 0) / 1024, r))
    ok = worst <= 1 + args.tolerance
    print("worst end/start %.3fx: %s (limit %.2fx)" % (worst, "flat" if ok else "GROWS",
                                                     1 + args.tolerance))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", help="the build's bin directory (esd-ps, esdd, esd-trainer, "
                    "esdctl, esd-data)")
    ap.add_argument("--iterations", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64, help="global batch")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="largest end/start growth allowed (default 0.10)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a job setting (docs/configuration.md), e.g. ps.checkpoint_every=100")
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between readings")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds for the whole job")
    ap.add_argument("--work", help="work directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.iterations < 100:
        ap.error("--iterations: at least 100")
    root = args.work or tempfile.mkdtemp(prefix="esd-soak.")
    os.makedirs(root, exist_ok=True)
    try:
        stream = os.path.join(root, "stream.esd")
        gen_stream(args.bin, stream)
        try:
            got, peak, secs = run(args, stream, os.path.join(root, "job"))
        except ClusterError as e:
            print("soak: the job failed: %s (its logs are kept in %s)" % (e, root))
            args.keep = True
            return 2
        return report(args, got, peak, secs)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
