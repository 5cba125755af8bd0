#!/usr/bin/env python3
"""Per-sample throughput of a node with 1 trainer against T trainers, the
same global batch (workers.trainers; docs/runtime.md).

    python3 bench/runtime/bench_trainers.py build/bin [--trainers 1,2]
        [--workers 2] [--batch 256] [--iterations 80] [--warmup 10]
        [--emulate NS] [--repeat 3]

Runs a local job (esd-ps, --workers esdd, their trainers) once per trainer
count, the counts alternating, --repeat times; prints the median samples
per second of the iterations' wall time (the daemons' summaries:
iterations x global batch / iterations_seconds) and the ratio against the
first count. --emulate NS: each trainer sleeps NS per sample of its share
(standing for a GPU each, the deployment several trainers are for);
without it the trainers run the reference model on the CPU (on a 2-core
machine more trainers then compete for the same cores). Standard library
only.
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "testbed"))
from esdcluster import Cluster  # noqa: E402


def gen_stream(bin_dir, path):
    import subprocess
    subprocess.run([os.path.join(bin_dir, "esd-data"), "gen", "-o", path, "--shape",
                    "criteo-kaggle", "-n", "60000", "--scale", "1000", "--max-rows",
                    "5000", "--seed", "3"], check=True, stdout=subprocess.DEVNULL)


def run_once(bin_dir, root, stream, args, trainers, rep):
    s = {"workers.n": args.workers, "workers.batch": args.batch // args.workers,
         "workers.trainers": trainers, "model.dim": 16, "model.hidden": 16,
         "job.iterations": args.iterations + args.warmup, "data.stream": stream,
         "cache.ratio": 0.08, "dispatch.method": "hybrid"}
    work = os.path.join(root, "t%d-r%d" % (trainers, rep))
    with Cluster(bin_dir, work, s, emulate_ns=args.emulate) as c:
        c.start()
        c.wait(timeout=600)
        sums = c.summaries()
    # the slowest node sets the pace under BSP
    secs = max(sm["iterations_seconds"] for sm in sums)
    iters = min(sm["iterations"] for sm in sums)
    return iters * args.batch / secs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("--trainers", default="1,2")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--iterations", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--emulate", type=int, default=None,
                    help="ns per sample each trainer sleeps (default: the reference model)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    counts = [int(x) for x in args.trainers.split(",")]
    root = tempfile.mkdtemp(prefix="esd-bench-trainers.")
    stream = os.path.join(root, "stream.esd")
    gen_stream(args.bin, stream)
    got = {t: [] for t in counts}
    for rep in range(args.repeat):
        for t in counts:
            got[t].append(run_once(args.bin, root, stream, args, t, rep))
    compute = ("emulated %d ns/sample per trainer" % args.emulate if args.emulate is not None
               else "reference model on the CPU")
    print("workers %d, global batch %d, %d iterations, %s; median of %d"
          % (args.workers, args.batch, args.iterations + args.warmup, compute, args.repeat))
    print("%-18s %14s %8s" % ("trainers per node", "samples/s", "ratio"))
    base = statistics.median(got[counts[0]])
    for t in counts:
        med = statistics.median(got[t])
        print("%-18d %14.0f %7.2fx" % (t, med, med / base))
    return 0


if __name__ == "__main__":
    sys.exit(main())
