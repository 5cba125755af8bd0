#!/usr/bin/python3
"""Train DLRM, WDL, DeepFM, DCN or a sequence model in PyTorch on a local
ESD testbed: one PS, n node daemons, on each a PyTorch trainer started by
torchrun (the example script of the model: dlrm.py, wdl.py, deepfm.py,
dcn.py, seq.py), a Criteo-shaped dataset stream. Prints rank 0's loss,
AUC and throughput as it goes.

    /usr/bin/python3 examples/pytorch/run.py --model dlrm --workers 4 --iters 50
    /usr/bin/python3 examples/pytorch/run.py --model dlrm --bag 0=3 --bag 5=2:8   # multi-hot
    /usr/bin/python3 examples/pytorch/run.py --model dlrm --bag 0=3 --weighted    # weighted bags
    /usr/bin/python3 examples/pytorch/run.py --model seq --bag 0=3:8 --bag 5=2:8  # sequences

Needs the build tree (build/bin: esd-ps, esdd, esd-data; build/lib/libesd.so).
The job's embedding optimizer (--opt, --lr) runs in the daemons and the PS;
the dense part is trained by PyTorch (--dense-opt, --dense-lr) under
DistributedDataParallel over gloo. The final tables are in
WORK/ckpt/ps-shard0.ckpt, the dense model in WORK/node0/dense.pt.
"""
import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "testbed"))
from esdcluster import Cluster  # noqa: E402

PY = "/usr/bin/python3"
# model name: (example script, its class)
MODELS = {"dlrm": "DLRM", "wdl": "WDL", "deepfm": "DeepFM", "dcn": "DCN", "seq": "SEQ"}


def model_class(name):
    """The nn.Module class of example model name (imported from its script)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    return getattr(importlib.import_module(name), MODELS[name])


def gen_stream(bin_dir, path, samples, seed, bags=(), weighted=False):
    """A Criteo-shaped stream; bags: esd-data gen's --bag T=MEAN[:MAX] values
    (multi-hot tables); weighted: a weight per ID (gen --weighted)."""
    argv = [os.path.join(bin_dir, "esd-data"), "gen", "-o", path, "--shape", "criteo-kaggle",
            "-n", str(samples), "--scale", "1000", "--max-rows", "2000", "--seed", str(seed)]
    for b in bags:
        argv += ["--bag", b]
    argv += ["--weighted"] if weighted else []
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def job_settings(a, stream, ckpt_dir):
    s = {"workers.n": a.workers, "workers.trainers": a.trainers, "workers.batch": a.batch,
         "model.dim": a.dim,
         "model.hidden": 4, "model.optimizer": a.opt, "model.lr": a.lr,
         "job.seed": a.seed, "job.iterations": a.iters, "data.stream": stream,
         "cache.ratio": a.cache_ratio, "ps.checkpoint_dir": ckpt_dir}
    if a.dims:  # model.dim follows them (their largest)
        s["model.dims"] = a.dims
        del s["model.dim"]
    if a.checkpoint_every:
        s["ps.checkpoint_every"] = a.checkpoint_every
    if a.dispatch:  # else the runtime's default (sizes fitted online)
        s["dispatch.method"] = a.dispatch
    if a.rates:
        s["workers.rates"] = a.rates
    if a.warm_start:
        s["ps.warm_start"] = a.warm_start
    return s


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(a, master_port):
    """trainer_cmd of a Cluster: torchrun on node w starting the model's
    script (a.trainers per node), rendezvous at 127.0.0.1:master_port."""
    def cmd(w, node_dir):
        # torch 1.13 on Python 3.11 fails on torchrun's default redirects
        return ["env", "ESD_NODE_DIR=" + node_dir, "ESD_LOG_EVERY=%d" % a.log_every,
                PY, "-m", "torch.distributed.run", "--nnodes", str(a.workers),
                "--node_rank", str(w), "--nproc_per_node", str(a.trainers), "--master_addr",
                "127.0.0.1", "--master_port", str(master_port), "--redirects", "1",
                "--tee", "1", os.path.join(HERE, a.model + ".py"), "--seed",
                str(a.model_seed), "--dense-lr", str(a.dense_lr), "--dense-opt", a.dense_opt,
                "--pooling", a.pooling] + (["--warm-start", a.warm_start] if a.warm_start
                                           else [])
    return cmd


def ps_iteration(a, work):
    """Shard 0's iteration (esdctl status), or -1 while it does not answer."""
    r = subprocess.run([os.path.join(a.bin, "esdctl"), "--socket", os.path.join(work, "ps0.sock"),
                        "--json", "status"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    try:
        return int(json.loads(r.stdout)["iteration"])
    except (ValueError, KeyError, TypeError):
        return -1


def run_job(a, work, stream, out=sys.stdout, c_trainer=False, resume=False, stop_after=None,
            crash_after=None):
    """Run one job in work/; returns (the path of the final PS checkpoint,
    the daemons' summaries). Streams rank 0's progress lines to out.
    c_trainer: the C reference trainer (esd-trainer) instead of PyTorch.
    resume: start from work/ckpt's checkpoint where there is one.
    stop_after: once shard 0 is past that iteration, `esdctl stop`: the job
    stops gracefully a few iterations on, every process exiting 0.
    crash_after: once shard 0 is past that iteration, every process of the
    job is killed (SIGKILL); returns (None, None)."""
    ckpt = os.path.join(work, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    with Cluster(a.bin, work, job_settings(a, stream, ckpt),
                 trainer_cmd=None if c_trainer else torchrun_cmd(a, free_port())) as c:
        if not c_trainer:  # one torchrun per node starts its a.trainers trainers
            c.trainers = 1
        c.start(resume=resume)
        log0 = os.path.join(work, "trainer0.log")
        done = False
        with open(log0) as f:
            while not done:
                line = f.readline()
                if line:
                    out.write(line)
                    out.flush()
                    continue
                if crash_after is not None and ps_iteration(a, work) > crash_after:
                    for name, p in list(c.procs.items()):
                        if p.poll() is None:
                            c.kill(name)
                    return None, None
                if stop_after is not None and ps_iteration(a, work) > stop_after:
                    subprocess.run([os.path.join(a.bin, "esdctl"), "--socket",
                                    os.path.join(work, "ps0.sock"), "stop"], check=True,
                                   stdout=subprocess.DEVNULL)
                    stop_after = None
                done = all(c.procs["esdd%d" % w].poll() is not None for w in range(c.n))
                for w in range(c.n):  # a dead trainer would leave its daemon waiting
                    rc = c.procs["trainer%d" % w].poll()
                    if rc not in (None, 0):
                        raise RuntimeError("trainer %d exited with %d: see %s/trainer%d.log"
                                           % (w, rc, work, w))
                if not done:
                    time.sleep(0.05)
            for w in range(c.n):  # the trainers print their last lines after the daemons end
                p = c.procs.get("trainer%d" % w)
                if p:
                    p.wait(timeout=60)
            out.write(f.read())
        c.wait(timeout=a.timeout)
        for w in range(c.n):
            p = c.procs.get("trainer%d" % w)
            if p and p.poll() != 0:
                raise RuntimeError("trainer %d exited with %s: see %s/trainer%d.log"
                                   % (w, p.returncode, work, w))
        sums = c.summaries()
    return os.path.join(ckpt, "ps-shard0.ckpt"), sums


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="dlrm")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--trainers", type=int, default=1,
                    help="trainers per node (workers.trainers; torchrun --nproc_per_node): "
                         "each trains its share of the node's micro-batch")
    ap.add_argument("--batch", type=int, default=64, help="samples per worker per iteration")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--dims", metavar="D,D,...",
                    help="model.dims: each table's dim (D*N: N copies); wdl and dcn "
                         "(DLRM's and DeepFM's interactions need one --dim)")
    ap.add_argument("--opt", choices=("sgd", "adagrad", "adam"), default="adagrad",
                    help="embedding optimizer (applied by the runtime)")
    ap.add_argument("--lr", type=float, default=0.05, help="embedding learning rate")
    ap.add_argument("--dense-lr", type=float, default=0.01)
    ap.add_argument("--dense-opt", choices=("adam", "sgd"), default="adam",
                    help="optimizer of the dense part (PyTorch's, on every trainer)")
    ap.add_argument("--seed", type=int, default=11, help="job seed (row initialisation)")
    ap.add_argument("--model-seed", type=int, default=1, help="seed of the dense weights")
    ap.add_argument("--cache-ratio", type=float, default=0.08)
    ap.add_argument("--dispatch", default="",
                    help="dispatch.method (default: none, the runtime's own method with "
                         "sizes fitted online; laia, hybrid, ... run as published)")
    ap.add_argument("--rates", default="",
                    help="workers.rates, e.g. 5G,5G,0.5G,0.5G (the links, shaped; the "
                         "default method fits the sizes to them)")
    ap.add_argument("--stream", help="dataset stream (default: generate a Criteo-shaped one)")
    ap.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                    help="a checkpoint every N iterations (ps.checkpoint_every); the trainers "
                         "save the dense model with each")
    ap.add_argument("--bag", action="append", default=[], metavar="T=MEAN[:MAX]",
                    help="the generated stream's table T (or all) multi-hot: bags of "
                         "Poisson(MEAN) IDs, at most MAX (esd-data gen --bag); repeatable")
    ap.add_argument("--weighted", action="store_true",
                    help="the generated stream's IDs carry weights (esd-data gen --weighted; "
                         "needs --bag): the models pool sum(w * row)")
    ap.add_argument("--pooling", default="sum",
                    help="how a bag's rows are pooled: sum, mean, or MODE,MODE,... one per "
                         "table")
    ap.add_argument("--samples", type=int, default=0,
                    help="samples to generate (default: enough for --iters)")
    ap.add_argument("--warm-start", metavar="DIR",
                    help="start from an export (tools/esd-export --torch): the rows "
                         "(ps.warm_start) and the dense model (DIR/dense.pt)")
    ap.add_argument("--work", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--log-every", type=int, default=10,
                    help="iterations between rank 0's progress lines")
    ap.add_argument("--eval", type=int, default=4000,
                    help="held-out samples after the trained ones to evaluate on at the end "
                         "(log loss, AUC; 0: none; evaluate.py)")
    ap.add_argument("--baseline", action="store_true",
                    help="then run the same job with the C reference trainer (esd-trainer) "
                         "and print both rates")
    return ap


def main():
    a = parser().parse_args()
    work = a.work or tempfile.mkdtemp(prefix="esd-pytorch.")
    os.makedirs(work, exist_ok=True)
    stream = a.stream
    if not stream:
        stream = os.path.join(work, "stream.esd")
        gen_stream(a.bin, stream, a.samples or (a.iters + 2) * a.batch * a.workers + a.eval, 7,
                   a.bag, a.weighted)
    print("%s on %d workers x %d samples, %d iterations, embeddings %s lr %g; work %s"
          % (a.model, a.workers, a.batch, a.iters, a.opt, a.lr, work), flush=True)
    t0 = time.time()
    ck, sums = run_job(a, work, stream)
    print("job done in %.1f s (trainers' start included); final tables %s"
          % (time.time() - t0, ck))
    if a.eval:
        import evaluate
        try:
            r = evaluate.evaluate(a.model, work, stream, samples=a.eval, bin_dir=a.bin,
                                  pooling=a.pooling, dims=a.dims)
            print("eval: %d held-out samples from %d, log loss %.5f, AUC %.4f"
                  % (r["samples"], r["first"], r["log_loss"], r["auc"]), flush=True)
        except ValueError as e:
            print("eval: not run: %s" % e)
    if a.baseline:
        # PyTorch: rank 0's count from its first micro-batch (the daemons'
        # clock would include the trainers' start, seconds of torch import).
        with open(os.path.join(work, "trainer0.log")) as f:
            m = re.search(r"done: (\d+) iterations in ([\d.]+) s", f.read())
        rate = int(m.group(1)) / float(m.group(2)) if m else float("nan")
        _, csums = run_job(a, os.path.join(work, "c-trainer"), stream, c_trainer=True)
        crate = min(s["iters_per_s"] for s in csums)
        print("PyTorch %s: %.1f iterations/s (%.0f samples/s); C reference trainer "
              "(esd-trainer, same job): %.1f iterations/s (%.0f samples/s); ratio %.2f"
              % (a.model, rate, rate * a.batch * a.workers, crate, crate * a.batch * a.workers,
                 rate / crate))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
