"""A job's export served by plain PyTorch: DLRM trained from PyTorch on a
local job (2 node daemons, a torchrun trainer on each) over a stream with
bags (multi-hot tables 0 and 5), exported with tools/esd-export --torch;
then a model built from the export alone (one nn.EmbeddingBag per table
from its .npy, the dense DLRM from dense.pt's state_dict, nothing of this
project imported to run it) scores the held-out samples after the trained
ones: its logits are evaluate.py's bit for bit, so its log loss and AUC
are evaluate.py's.

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
    if failures:
        print("%d check(s) failed; files kept in %s" % (len(failures), root))
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
