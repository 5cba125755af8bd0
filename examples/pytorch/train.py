"""One PyTorch trainer of an ESD job: attaches to its node daemon and trains
WDL, DeepFM or DCN on the micro-batches the daemon hands it.

    python3 train.py --dir NODE_DIR --rank R --world N --init tcp://HOST:PORT \
                     --model deepfm [--seed 1] [--dense-lr 0.01] [--record OUT.npz]

Under torchrun (esd-launch starts it so) every option but --model has its
default from the environment: the node directory from ESD_NODE_DIR, the
rank and world from RANK and WORLD_SIZE, the rendezvous env:// (torchrun's
MASTER_ADDR and MASTER_PORT); GROUP_RANK must be the daemon's worker rank.
SIGTERM asks the daemon for a graceful stop of the job.

Per micro-batch:
  1. rows: t.values is a zero-copy view of the node's cache (torch.from_numpy
     shares the memory); the rows of the micro-batch are gathered by slot
     into an (m, tables, dim) leaf tensor;
  2. forward, summed logistic loss / global_k, backward;
  3. the embedding gradients are scatter-added into t.grads (in place, the
     node's gradient slots) in sample order, then committed; the runtime
     applies the job's embedding optimizer (node daemons and PS);
  4. the dense gradients (and the loss, for the log) are summed over the
     trainers with one gloo all-reduce, and every trainer takes the same
     optimizer step.
Rank 0 prints one line per iteration: iter, global loss, samples/s.
"""
import argparse
import datetime
import os
import signal
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "runtime", "python"))
sys.path.insert(0, HERE)
import esd  # noqa: E402
import models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    env = os.environ
    ap.add_argument("--dir", default=env.get("ESD_NODE_DIR"),
                    help="node directory of this trainer's esdd (default $ESD_NODE_DIR)")
    ap.add_argument("--rank", type=int, default=int(env.get("RANK", -1)),
                    help="this trainer among all trainers (default $RANK)")
    ap.add_argument("--world", type=int, default=int(env.get("WORLD_SIZE", 0)),
                    help="all trainers of the job (default $WORLD_SIZE)")
    ap.add_argument("--init", default="env://",
                    help="torch.distributed init method (default env://: torchrun's "
                         "MASTER_ADDR, MASTER_PORT)")
    ap.add_argument("--model", choices=sorted(models.MODELS), default="deepfm")
    ap.add_argument("--seed", type=int, default=1, help="seed of the dense weights")
    ap.add_argument("--dense-lr", type=float, default=0.01)
    ap.add_argument("--dense-opt", choices=("adam", "sgd"), default="adam")
    ap.add_argument("--sync-timeout", type=float, default=120,
                    help="seconds gloo waits for the other trainers")
    ap.add_argument("--record", help="write losses and the final dense weights here (.npz)")
    a = ap.parse_args()
    if not a.dir or a.rank < 0 or a.world < 1:
        ap.error("--dir, --rank and --world are needed (or ESD_NODE_DIR, RANK and "
                 "WORLD_SIZE, as torchrun sets them)")

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    # A bounded wait: a trainer that died leaves the others failing here or
    # in the all-reduce after 2 minutes rather than hanging for gloo's 30.
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=a.sync_timeout))

    t = esd.Trainer(a.dir)
    info = t.info
    node = int(os.environ.get("GROUP_RANK", a.rank))  # torchrun: the node's rank
    if info["rank"] != node or info["workers"] * info["trainers"] != a.world:
        sys.exit("train.py: node %s is worker %d of %d with %d trainer(s) each, not node %d "
                 "of a world of %d trainers" % (a.dir, info["rank"], info["workers"],
                                                info["trainers"], node, a.world))
    signal.signal(signal.SIGTERM, lambda sig, frame: t.request_stop())
    model = models.build(a.model, info["tables"], info["dim"], info["dense"], a.seed)
    opt = models.dense_optimizer(model, a.dense_lr, a.dense_opt)
    params = list(model.parameters())
    sizes = [p.numel() for p in params]
    flat = torch.zeros(sum(sizes) + 1)

    values = torch.from_numpy(t.values)  # (capacity, dim): the cache, no copy
    losses, times, t0, last = [], [], time.time(), time.time()
    k = 0
    for mb in t:
        slots = torch.from_numpy(mb.slots.astype(np.int64))
        emb = values[slots].requires_grad_(True)  # (m, tables, dim)
        dense = torch.from_numpy(np.array(mb.dense))
        labels = torch.from_numpy(np.array(mb.labels))
        opt.zero_grad(set_to_none=False)
        loss = models.loss_sum(model(emb, dense), labels) / mb.global_k
        loss.backward()
        if mb.m:
            np.add.at(t.grads, mb.slots, emb.grad.numpy())
        t.commit(mb, loss.item())

        off = 0
        for p, n in zip(params, sizes):
            flat[off:off + n] = p.grad.reshape(-1)
            off += n
        flat[off] = loss.item()
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        off = 0
        for p, n in zip(params, sizes):
            p.grad.copy_(flat[off:off + n].view_as(p.grad))
            off += n
        opt.step()
        gl = float(flat[off])
        losses.append(gl)
        now = time.time()
        times.append(now - last)
        k = mb.global_k
        if a.rank == 0:
            print("iter %d loss %.5f samples/s %.0f" % (mb.iter, gl, k / max(now - last, 1e-9)),
                  flush=True)
        last = now
    el = time.time() - t0
    if a.rank == 0:
        med = float(np.median(times)) if times else float("nan")
        print("done: %d iterations in %.2f s, final loss %.5f; median iteration %.1f ms "
              "= %.0f samples/s" % (len(losses), el, losses[-1] if losses else float("nan"),
                                    1e3 * med, k / med if times else 0), flush=True)
    if a.record:
        np.savez(a.record, losses=np.array(losses),
                 dense=torch.cat([p.detach().reshape(-1) for p in params]).numpy())
    t.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
