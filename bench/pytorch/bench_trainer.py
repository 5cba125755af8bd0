#!/usr/bin/python3
"""What the ESD binding adds to a PyTorch trainer's iteration: one node
(1 PS, 1 esdd), this process its trainer, DLRM on a Criteo-shaped stream.
Every iteration times (a) the wait for the micro-batch (the runtime's
barrier, pulls and pushes), (b) the step through esd.torch (Batch,
EmbeddingBagCollection forward and backward, the dense model, its
optimizer, the commit), and (c) the same step on the same rows held in a
local nn.EmbeddingBag (sparse gradients, SGD on them: what a trainer
without the runtime does). The binding's overhead is (b) - (c), against
the iteration (a) + (b). Medians over the iterations after warm-up.

    /usr/bin/python3 bench/pytorch/bench_trainer.py [--bin build/bin]
        [--batch 128] [--dim 16] [--iters 60] [--model dlrm]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--model", choices=sorted(launcher.MODELS), default="dlrm")
    a = ap.parse_args()
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="esd-bench-trainer.")
    stream = os.path.join(work, "stream.esd")
    launcher.gen_stream(a.bin, stream, (a.iters + 2) * a.batch, 7)
    settings = {"workers.n": 1, "workers.batch": a.batch, "model.dim": a.dim,
                "model.optimizer": "sgd", "model.lr": 0.05, "job.iterations": a.iters,
                "data.stream": stream, "cache.ratio": 0.5}
    cls = launcher.model_class(a.model)
    waits, steps, locals_ = [], [], []
    with Cluster(a.bin, work, settings) as c:
        c.trainers = 0  # this process is the trainer
        c.start()
        c.wait_socket(0)
        t = esd.Trainer(c.node_dir(0))
        T, dim, nd = t.info["tables"], t.info["dim"], t.info["dense"]
        ebc = et.EmbeddingBagCollection(t)
        torch.manual_seed(1)
        model = cls(T, dim, nd)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        torch.manual_seed(1)
        local_model = cls(T, dim, nd)
        lopt = torch.optim.Adam(local_model.parameters(), lr=0.01)
        table = nn.EmbeddingBag(t.values.shape[0], dim, mode="sum", sparse=True,
                                _weight=torch.from_numpy(np.array(t.values)))
        topt = torch.optim.SGD(table.parameters(), lr=0.05)

        class S:  # the Session's part RowOptimizer uses
            trainer, current = t, None
        sess = S()
        rows = et.RowOptimizer(sess)
        while True:
            t0 = time.perf_counter_ns()
            mb = t.next()
            if mb is None:
                break
            t1 = time.perf_counter_ns()
            batch = sess.current = et.Batch(mb)
            loss = et.bce(model(ebc(batch), batch.dense), batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            rows.step(loss)
            t2 = time.perf_counter_ns()
            # the same step without the runtime (the batch's tensors are copies)
            flat = batch.slots.reshape(-1)
            emb = table(flat, torch.arange(flat.numel())).view(batch.m, T, dim)
            lloss = et.bce(local_model(emb, batch.dense), batch)
            lopt.zero_grad()
            topt.zero_grad()
            lloss.backward()
            lopt.step()
            topt.step()
            t3 = time.perf_counter_ns()
            if mb.iter > a.warmup:
                waits.append(t1 - t0)
                steps.append(t2 - t1)
                locals_.append(t3 - t2)
        t.close()
        c.wait(timeout=120)
    w, s, lo = (float(np.median(x)) / 1e3 for x in (waits, steps, locals_))
    print("# %s, batch %d, dim %d, %d iterations after %d of warm-up, medians, one thread"
          % (a.model, a.batch, a.dim, len(steps), a.warmup))
    print("| wait for the batch us | step through esd.torch us | same step, local table us "
          "| binding overhead us | overhead / iteration |")
    print("|---:|---:|---:|---:|---:|")
    print("| %.0f | %.0f | %.0f | %.0f | %.1f %% |" % (w, s, lo, s - lo, 100 * (s - lo) / (w + s)))


if __name__ == "__main__":
    main()
