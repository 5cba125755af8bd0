#!/usr/bin/python3
"""The embedding part of a PyTorch step through esd.torch against a local
table: forward and backward of BATCH samples x 26 features x DIM through
EmbeddingBagCollection (rows read from a running node's shared cache,
gradients added into its gradient slots) and through torch.nn.EmbeddingBag
holding the same rows in the trainer (dense and sparse gradients), plus the
binding's earlier path (a numpy-indexed copy, then np.add.at). One job of
one node: this process is its trainer. Every micro-batch is timed REPS
times per side after one untimed run, each side first in turn; prints
medians and ratios. --bag (esd-data gen's) makes tables multi-hot: both
sides then pool the same bags by sum (the numpy path has no bags).

    /usr/bin/python3 bench/pytorch/bench_embedding.py [--bin build/bin]
        [--batch 128] [--dim 128] [--iters 30] [--reps 5] [--bag T=MEAN[:MAX]]...
        [--clock wall|cpu]
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "runtime", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools", "testbed"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import esd  # noqa: E402
import esd.torch as et  # noqa: E402
from esdcluster import Cluster  # noqa: E402
import run as launcher  # noqa: E402


CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
clock = CLOCKS["wall"]


def timed(fn):
    t0 = clock()
    fn()
    return clock() - t0


def sides(t, ebc, batch, local_dense, local_sparse):
    """name -> a function doing one forward and backward of batch."""
    flat = batch.slots.reshape(-1)
    offs = batch.offsets if batch.offsets is not None else torch.arange(flat.numel())
    values = torch.from_numpy(t.values)

    def module():
        ebc(batch).sum().backward()

    def eb(table):
        def f():
            table.weight.grad = None
            table(flat, offs).sum().backward()
        return f

    def numpy_path():  # the binding before esd.torch: copy out, scatter back
        emb = values[batch.slots].requires_grad_(True)
        emb.sum().backward()
        np.add.at(t.grads, batch.mb.slots, emb.grad.numpy())

    out = {"esd.torch EmbeddingBagCollection": module,
           "nn.EmbeddingBag, dense gradient": eb(local_dense),
           "nn.EmbeddingBag, sparse gradient": eb(local_sparse)}
    if batch.offsets is None:
        out["numpy gather + np.add.at (old path)"] = numpy_path
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bag", action="append", default=[], metavar="T=MEAN[:MAX]",
                    help="multi-hot table T (or all), esd-data gen --bag; repeatable")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                    help="wall: elapsed time; cpu: this thread's CPU time (on a busy "
                         "machine, without the time other processes hold the core)")
    a = ap.parse_args()
    global clock
    clock = CLOCKS[a.clock]
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="esd-bench-emb.")
    stream = os.path.join(work, "stream.esd")
    launcher.gen_stream(a.bin, stream, (a.iters + 2) * a.batch, 7, a.bag)
    settings = {"workers.n": 1, "workers.batch": a.batch, "model.dim": a.dim,
                "model.optimizer": "sgd", "model.lr": 1e-6, "job.iterations": a.iters,
                "data.stream": stream, "cache.ratio": 0.5, "dispatch.method": "laia"}
    times = {}  # path -> ns of each timed run
    keys = []   # keys per micro-batch
    with Cluster(a.bin, work, settings) as c:
        c.trainers = 0  # this process is the trainer
        c.start()
        c.wait_socket(0)
        t = esd.Trainer(c.node_dir(0))
        ebc = et.EmbeddingBagCollection(t)
        cap, dim = t.values.shape
        w = torch.from_numpy(np.array(t.values))
        local_dense = nn.EmbeddingBag(cap, dim, mode="sum", _weight=w.clone())
        local_sparse = nn.EmbeddingBag(cap, dim, mode="sum", sparse=True, _weight=w.clone())
        for mb in t:
            batch = et.Batch(mb)
            keys.append(mb.nkeys)
            if mb.m:
                fns = list(sides(t, ebc, batch, local_dense, local_sparse).items())
                r = mb.iter % len(fns)  # each side first in turn
                for name, fn in fns[r:] + fns[:r]:
                    fn()  # warm: what a step before it left in the caches is its own
                    for _ in range(a.reps):
                        times.setdefault(name, []).append(timed(fn))
            t.commit(mb, 0.0)
        del ebc
        t.close()
        c.wait(timeout=120)
    base = float(np.median(times["nn.EmbeddingBag, dense gradient"]))
    sparse = float(np.median(times["nn.EmbeddingBag, sparse gradient"]))
    print("# forward + backward of %d samples x 26 features x dim %d (%s: %.0f ids a "
          "micro-batch), %d micro-batches x %d reps, medians (one thread, %s clock)"
          % (a.batch, a.dim, "bags " + " ".join(a.bag) if a.bag else "one id a feature",
             float(np.mean(keys)), a.iters, a.reps, a.clock))
    print("| path | median us | p90 us | / EmbeddingBag dense | / EmbeddingBag sparse |")
    print("|---|---:|---:|---:|---:|")
    for name, ts in times.items():
        med = float(np.median(ts))
        print("| %s | %.1f | %.1f | %.2f | %.2f |" % (name, med / 1e3,
                                                     float(np.percentile(ts, 90)) / 1e3,
                                                     med / base, med / sparse))


if __name__ == "__main__":
    main()
