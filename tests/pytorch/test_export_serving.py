"""A job's export served by plain PyTorch: DLRM trained from PyTorch on a
local job (2 node daemons, a torchrun trainer on each) over a stream with
bags (multi-hot tables 0 and 5), exported with tools/esd-export --torch;
then a model built from the export alone (one nn.EmbeddingBag per table
from its .npy, the dense DLRM from dense.pt's state_dict, nothing of this
project imported to run it) scores the held-out samples after the trained
ones: its logits are evaluate.py's bit for bit, so its log loss and AUC
are evaluate.py's. A new job warm started from the export (run.py
--warm-start: the rows through ps.warm_start, the dense model through
train.py --warm-start) begins with the export's dense weights, bit for
bit, and its first iteration's loss is the served model's.

usage: test_export_serving.py BIN_DIR     exit 0 pass, 1 fail, 77 skip
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EX = os.path.join(ROOT, "examples", "pytorch")

import torch_needed  # noqa: E402,F401 - exits 77 without torch

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, EX)
import esdio  # noqa: E402
import evaluate  # noqa: E402
import run as launcher  # noqa: E402
from dlrm import DLRM  # noqa: E402
from train import et  # noqa: E402

WORKERS, BATCH, ITERS, DIM, EVAL = 2, 32, 20, 8, 2000
BAGS = ("0=3", "5=1.5:6")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


class Served(nn.Module):
    """What a serving stack builds from the export: one EmbeddingBag per
    table, the dense model as trained."""

    def __init__(self, export_dir, dense_model):
        super().__init__()
        with open(os.path.join(export_dir, "manifest.json")) as f:
            man = json.load(f)
        self.bags = nn.ModuleList(
            nn.EmbeddingBag.from_pretrained(torch.from_numpy(np.load(os.path.join(
                export_dir, t["file"]))), mode="sum", freeze=True) for t in man["tables"])
        dense_model.load_state_dict(torch.load(os.path.join(export_dir, "dense.pt")))
        self.dense = dense_model.eval()

    def forward(self, ids, offsets, dense):
        """ids[t], offsets[t]: table t's IDs and its bags' starts."""
        emb = torch.stack([b(i, o) for b, i, o in zip(self.bags, ids, offsets)], dim=1)
        return self.dense(emb, dense)


def per_table(keys, off, T):
    """The stream's bags as EmbeddingBag inputs: per table its IDs and the
    start of each sample's bag."""
    n = (len(off) - 1) // T
    ids, offsets = [], []
    for t in range(T):
        starts, ends = off[t:-1:T][:n], off[t + 1::T][:n]
        lens = ends - starts
        idx = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) \
            if lens.sum() else np.empty(0, np.int64)
        ids.append(torch.from_numpy((keys[idx] & np.uint64((1 << 48) - 1)).astype(np.int64)))
        offsets.append(torch.from_numpy(np.concatenate([[0], np.cumsum(lens)[:-1]])
                                        .astype(np.int64)))
    return ids, offsets


def refusals(root, export, T, D):
    """A warm start without dense.pt, or with one of another model, is an
    error naming the file (Session's loader called without a job)."""
    class Rank0:
        rank = 0
    for where, model, what in [(root, DLRM(T, DIM, D), "does not exist"),
                               (export, DLRM(T, DIM * 2, D), "does not fit the model")]:
        try:
            et.Session._warm_start(Rank0(), model, where)
            check(False, "warm start from %s refused" % where)
        except et.esd.EsdError as e:
            check(os.path.join(where, "dense.pt") in str(e) and what in str(e),
                  "warm start refused: %s" % e)


def warm_start(a, root, stream, export, served):
    """A new PyTorch job warm started from the export (run.py --warm-start:
    ps.warm_start for the rows, train.py --warm-start for dense.pt), with
    another job seed and dense seed, its dense learning rate 0: its dense
    weights are the export's, and its first iteration's loss is the served
    model's on the first global batch (rows and dense model start as
    exported)."""
    a.warm_start, a.iters, a.dense_lr, a.seed, a.model_seed = export, 2, 0.0, 23, 9
    work = os.path.join(root, "warm")
    os.makedirs(work)
    with open(os.path.join(work, "progress.log"), "w") as log:
        launcher.run_job(a, work, stream, out=log)
    with open(os.path.join(work, "trainer0.log")) as f:
        said = "warm started the dense model from %s" % os.path.join(export, "dense.pt") \
            in f.read()
    check(said, "the warm-started trainer says it loaded the export's dense.pt")
    got = torch.load(os.path.join(work, "node0", "dense.pt"))
    want = torch.load(os.path.join(export, "dense.pt"))
    check(set(got["model"]) == set(want) and
          all(torch.equal(got["model"][k], want[k]) for k in want),
          "the warm-started job's dense weights == the export's, %d tensors bit for bit"
          % len(want))
    k = WORKERS * BATCH
    labels, dense, keys, off, T = evaluate.held_out(stream, 0, k)
    refusals(root, export, T, dense.shape[1])
    ids, offsets = per_table(keys, off, T)
    with torch.no_grad():
        logits = served(ids, offsets, torch.from_numpy(dense))
        first = nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(labels), reduction="sum").item() / k
    loss1 = got["losses"][0]
    check(abs(loss1 - first) <= 1e-6 * abs(first),
          "the warm-started job's iteration 1 loss %.7f == the served model's on its first "
          "global batch %.7f" % (loss1, first))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bin_dir = os.path.abspath(sys.argv[1])
    root = tempfile.mkdtemp(prefix="esd-export-serving.")
    stream = os.path.join(root, "stream.esd")
    launcher.gen_stream(bin_dir, stream, (ITERS + 2) * WORKERS * BATCH + EVAL, 7, BAGS)
    a = launcher.parser().parse_args([])
    a.bin, a.model, a.workers, a.batch, a.iters, a.dim = bin_dir, "dlrm", WORKERS, BATCH, \
        ITERS, DIM
    a.timeout = 200
    work = os.path.join(root, "job")
    os.makedirs(work)
    with open(os.path.join(work, "progress.log"), "w") as log:
        launcher.run_job(a, work, stream, out=log)
    want = evaluate.evaluate("dlrm", work, stream, samples=EVAL, bin_dir=bin_dir)
    out = os.path.join(root, "export")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "esd-export"),
                        os.path.join(work, "ckpt"), out, "--stream", stream, "--torch",
                        os.path.join(work, "node0"), "--bin", bin_dir],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, "esd-export --torch: %s" % r.stdout.strip())
    if r.returncode:
        return 1
    labels, dense, keys, off, T = evaluate.held_out(stream, want["first"], EVAL)
    model = Served(out, DLRM(T, DIM, dense.shape[1]))
    ids, offsets = per_table(keys, off, T)
    with torch.no_grad():
        logits = model(ids, offsets, torch.from_numpy(dense))
        loss = nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(labels)).item()
    auc = et.auc(logits.numpy(), labels)
    # evaluate.py's logits, for the bitwise check
    _, _, ck_keys, ck_values, it = evaluate.load_rows(os.path.join(work, "ckpt"))
    rows, _ = evaluate.rows_of(keys, esdio.read_ckpt(os.path.join(
        work, "ckpt", "ps-shard0.ckpt"))["seed"], ck_keys, ck_values)
    ref = DLRM(T, DIM, dense.shape[1])
    ref.load_state_dict(et.load_dense(os.path.join(work, "node0"), it)[0]["model"])
    with torch.no_grad():
        ref_logits = ref.eval()(esdio.pool(rows, off, T), torch.from_numpy(dense))
    check(torch.equal(logits, ref_logits),
          "the served model's logits on %d held-out samples are evaluate.py's bit for bit"
          % len(labels))
    check(loss == want["log_loss"] and auc == want["auc"],
          "log loss %.6f AUC %.4f == evaluate.py's %.6f %.4f (iteration %d, %d samples from %d)"
          % (loss, auc, want["log_loss"], want["auc"], want["iteration"], want["samples"],
             want["first"]))
    warm_start(a, root, stream, out, model)
    if failures:
        print("%d check(s) failed; files kept in %s" % (len(failures), root))
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
