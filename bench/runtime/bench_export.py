#!/usr/bin/python3
"""Export time and size (tools/esd-export) against writing the same
arrays with np.save, side by side in the same run.

    /usr/bin/python3 bench/runtime/bench_export.py [--bin build/bin] [--scale 100]
        [--dim 16] [--reps 5]

A Criteo-shaped stream (esd-data gen --shape criteo-kaggle --scale S
--max-rows 200000), esd-ref trains 50 iterations of 1024 and writes its
checkpoint; then, alternating, esd-export of it into a new directory and
the baseline: np.save of arrays of the export's shapes (the bytes any
.npy writer must write). Prints the median of each, their ratio, the
export's size and the checkpoint's.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--scale", type=int, default=100, help="esd-data gen --scale")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="esd-bench-export.")
    try:
        stream, ck = os.path.join(root, "s.esd"), os.path.join(root, "ck")
        os.makedirs(ck)
        subprocess.run([os.path.join(a.bin, "esd-data"), "gen", "-o", stream, "--shape",
                        "criteo-kaggle", "-n", "60000", "--scale", str(a.scale), "--max-rows",
                        "200000", "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(a.bin, "esd-ref"), "--out", os.path.join(ck, "ps-shard0.ckpt"),
                        "--stream", stream, "--iters", "50", "--batch", "1024", "--dim",
                        str(a.dim), "--opt", "adagrad"], check=True, stdout=subprocess.DEVNULL)
        exp_t, base_t, shapes = [], [], None
        for r in range(a.reps):
            out = os.path.join(root, "out%d" % r)
            t0 = time.perf_counter()
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "esd-export"), ck, out,
                            "--stream", stream, "--bin", a.bin], check=True,
                           stdout=subprocess.DEVNULL)
            exp_t.append(time.perf_counter() - t0)
            size = du(out)
            if shapes is None:
                shapes = [np.load(os.path.join(d, f), mmap_mode="r").shape
                          for d, _, fs in os.walk(out) for f in sorted(fs) if f.endswith(".npy")]
            shutil.rmtree(out)
            base = os.path.join(root, "base%d" % r)
            os.makedirs(base)
            arrays = [np.ones(s, np.float32) for s in shapes]
            t0 = time.perf_counter()
            for i, x in enumerate(arrays):
                np.save(os.path.join(base, "%d.npy" % i), x)
            base_t.append(time.perf_counter() - t0)
            shutil.rmtree(base)
        rows = sum(s[0] for s in shapes if len(s) == 2 and s[1] == a.dim)
        me, mb = statistics.median(exp_t), statistics.median(base_t)
        print("table rows %d x dim %d; checkpoint %.1f MiB; export %.1f MiB in %d files"
              % (rows, a.dim, du(ck) / 2**20, size / 2**20, len(shapes) + 1))
        print("esd-export median %.3f s (process start, validation, init of untrained rows "
              "included); np.save of the same shapes median %.3f s; ratio %.1f"
              % (me, mb, me / mb))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
