"""Evaluate a trained job on held-out samples: the final rows from the PS
checkpoint (every shard's file), the dense model from rank 0's dense.pt,
a forward without gradients, log loss and AUC.

    /usr/bin/python3 examples/pytorch/evaluate.py --model dlrm --work DIR [--stream S]
        [--skip N] [--samples N] [--pooling sum|mean|MODE,MODE,...]

DIR is a job's work directory as run.py leaves it (DIR/ckpt/ps-shard*.ckpt,
DIR/node0/dense.pt, DIR/stream.esd). The held-out samples start, by
default, at the checkpoint's data cursor: the first sample the job did
not train on. A checkpoint is the job's state after an iteration, when
every node has pushed its DIRTY rows' values to the PS (at the end of
training it has flushed them), so it holds the latest value of every
trained row (a node's cache may hold OUTDATED copies; the PS never does
at a checkpoint); a row the job never trained has its initial value
(esd_row_init of the job's seed). The dense model is the one of the
checkpoint's iteration: DIR/node0/dense@ITER.pt, which the trainers save
at every checkpoint boundary (ps.checkpoint_every), or dense.pt when it is
of that iteration. So a running job can be evaluated at its latest
checkpoint while it trains on. A stream
with bags (multi-hot) pools each bag as the trainers did (--pooling, the
training's: sum by default); a sequence model (seq.py) takes each bag's
rows unpooled, as its trainers did.
"""
import argparse
import glob
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import esdio  # noqa: E402
import run  # noqa: E402
from train import et  # noqa: E402


def load_rows(ckpt_dir, bin_dir=None):
    """(seed, cursor, sorted keys, their values) over every shard's file,
    each checked with esd-ref info first when bin_dir is given."""
    paths = sorted(glob.glob(os.path.join(ckpt_dir, "ps-shard*.ckpt")))
    paths = [p for p in paths if ".prev." not in p]
    if not paths:
        raise ValueError("no ps-shard*.ckpt in %s" % ckpt_dir)
    if bin_dir:
        for p in paths:
            r = subprocess.run([os.path.join(bin_dir, "esd-ref"), "info", p],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode:
                raise ValueError("%s is not a valid checkpoint:\n%s" % (p, r.stdout))
    cks = [esdio.read_ckpt(p) for p in paths]
    if len({c["iter"] for c in cks}) != 1:
        raise ValueError("the shards' checkpoints in %s are of different iterations (%s): "
                         "one is being written; try again" % (ckpt_dir,
                                                              [c["iter"] for c in cks]))
    keys = np.concatenate([c["keys"] for c in cks])
    values = np.concatenate([c["values"] for c in cks])
    o = np.argsort(keys)
    return cks[0]["seed"], cks[0]["cursor"], keys[o], values[o], cks[0]["iter"]


def parse_dims(text, T, dim):
    """model.dims ("D,D*N,...") as one dim per table; None: dim for all."""
    if not text:
        return [dim] * T
    dims = []
    for item in text.split(","):
        d, _, n = item.strip().partition("*")
        dims += [int(d)] * (int(n) if n else 1)
    if len(dims) != T or max(dims) != dim:
        raise ValueError("model.dims %s: not %d dims whose largest is the checkpoint's %d"
                         % (text, T, dim))
    return dims


def rows_of(keys, seed, ck_keys, ck_values, dims=None):
    """The rows of keys (any shape): the checkpoint's, else the initial
    value (of its table's dim, zeros after it, with dims)."""
    flat = keys.reshape(-1)
    at = np.searchsorted(ck_keys, flat).clip(0, max(len(ck_keys) - 1, 0))
    found = ck_keys[at] == flat if len(ck_keys) else np.zeros(len(flat), bool)
    dim = ck_values.shape[1]
    out = np.empty((len(flat), dim), np.float32)
    out[found] = ck_values[at[found]]
    if (~found).any() and dims is not None and len(set(dims)) > 1:
        table = (flat >> np.uint64(esdio.KEY_ID_BITS)).astype(np.int64)
        for t, d in enumerate(dims):
            new = ~found & (table == t)
            out[new] = 0.0
            out[new, :d] = esdio.row_init(seed, flat[new], d)
    elif (~found).any():
        out[~found] = esdio.row_init(seed, flat[~found], dim)
    return out.reshape(keys.shape + (dim,)), int((~found).sum())


def held_out(path, skip, samples=None, weights=False):
    """(labels, dense, keys, bag offsets from 0, T) of the samples from skip
    on (samples of them, or the rest); weights=True: and each key's weight
    (1 on an unweighted stream)."""
    labels, dense, keys, off, T, w = esdio.read_bags(path, None if samples is None
                                                     else skip + samples, weights=True)
    off = off[skip * T:] if skip < len(labels) else off[-1:]
    out = labels[skip:], dense[skip:], keys[off[0]:], off - off[0], T
    return out + (w[off[0]:],) if weights else out


def evaluate(model_name, work, stream=None, skip=None, samples=None, bin_dir=None,
             pooling="sum", dims=None):
    """{'samples', 'log_loss', 'auc', 'untrained_ids'} on held-out samples."""
    seed, cursor, ck_keys, ck_values, it = load_rows(os.path.join(work, "ckpt"), bin_dir)
    skip = cursor if skip is None else skip
    labels, dense, keys, off, T, w = held_out(stream or os.path.join(work, "stream.esd"),
                                              skip, samples, weights=True)
    if not len(labels):
        raise ValueError("no held-out samples: the stream ends at the %d the job trained on"
                         % skip)
    saved, _ = et.load_dense(os.path.join(work, "node0"), it)  # rank 0's
    dims = parse_dims(dims, T, ck_values.shape[1])
    wide = len(set(dims)) > 1  # model.dims: the features side by side, (m, sum d_t)
    model = run.model_class(model_name)(T, ck_values.shape[1], dense.shape[1],
                                        **({"emb_width": sum(dims)} if wide else {}))
    model.load_state_dict(saved["model"])
    model.eval()
    rows, untrained = rows_of(keys, seed, ck_keys, ck_values, dims)
    weighted = bool(len(w)) and not np.all(w == 1)  # a weighted stream's bags
    if getattr(type(model), "unpooled", False):  # a sequence model: each ID its row
        import seq
        emb = seq.jagged(rows, off, T)
    else:
        emb = esdio.pool(rows, off, T, esdio.pooling_modes(pooling, T), w if weighted else None)
    if wide:
        emb = torch.cat([emb[:, t, :d] for t, d in enumerate(dims)], 1)
    with torch.no_grad():
        logits = model(emb, torch.from_numpy(dense))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(labels)).item()
    return {"samples": len(labels), "log_loss": loss, "auc": et.auc(logits.numpy(), labels),
            "untrained_ids": untrained, "first": skip, "iteration": it}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(run.MODELS), required=True)
    ap.add_argument("--work", required=True, help="the job's work directory (run.py --work)")
    ap.add_argument("--stream", help="held-out samples (default: WORK/stream.esd)")
    ap.add_argument("--skip", type=int, help="first sample (default: the checkpoint's cursor)")
    ap.add_argument("--samples", type=int, help="samples to evaluate (default: the rest)")
    ap.add_argument("--bin", default=os.path.join(run.ROOT, "build", "bin"),
                    help="where esd-ref is, to check the checkpoint first")
    ap.add_argument("--pooling", default="sum",
                    help="how the training pooled a bag (multi-hot streams)")
    ap.add_argument("--dims", help="the job's model.dims (tables of their own dims)")
    a = ap.parse_args()
    try:
        r = evaluate(a.model, a.work, a.stream, a.skip, a.samples, a.bin, a.pooling, a.dims)
    except (ValueError, OSError) as e:  # a bad stream or checkpoint, no dense model
        sys.exit("evaluate.py: %s" % e)
    print("eval of iteration %d: %d held-out samples from %d, log loss %.5f, AUC %.4f (%d ids "
          "the job never trained)" % (r["iteration"], r["samples"], r["first"], r["log_loss"],
                                      r["auc"], r["untrained_ids"]))


if __name__ == "__main__":
    main()
