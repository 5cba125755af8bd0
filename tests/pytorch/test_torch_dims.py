"""esd.torch with per-table dims (model.dims, docs/design.md §6) against a
real node (1 PS, 1 esdd; this process is the trainer): the trainer reads
each table's dim; the cache's rows are zero past their table's dim; the
EmbeddingBagCollection returns (m, d_1 + ... + d_T), each feature its
rows' first d_t floats (bags pooled by sum, one module configured by
names too), and its backward adds the upstream gradient into those d_t
floats only, the padding staying exactly zero; the EmbeddingCollection's
rows are (n, d_t). Then the Wide & Deep example trains on such a job under
torchrun (examples/pytorch/run.py --dims: the model takes the features side
by side) and evaluates held-out samples, and DLRM is refused naming why
(not with ESD_SANITIZED=1, the sanitizer build: Python over the C paths
the first part checks).

usage: test_torch_dims.py BIN_DIR     exit 0 pass, 1 fail, 77 skip
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
import torch_needed  # noqa: E402,F401 - exits 77 without torch

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "runtime", "python"))
sys.path.insert(0, os.path.join(ROOT, "tools", "testbed"))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import esd  # noqa: E402
import esd.torch as et  # noqa: E402
from esdcluster import Cluster  # noqa: E402
import run as launcher  # noqa: E402

DIMS = [4] * 10 + [12] * 10 + [7] * 6  # 26 tables (criteo-kaggle); 12: a block of 8 and a tail
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def pooled_ref(t, slots):
    """(m, sum d_t) of one-id features: row slots[i, j]'s first d_j floats."""
    rows = np.array(t.values)[slots]
    return np.concatenate([rows[:, j, :d] for j, d in enumerate(DIMS)], 1)


def bags(t, mb):
    """Features of two ids each (feature j of sample i: slots[i, j] and the
    next feature's), pooled by sum: forward, backward, padding."""
    flat = mb.slots.astype(np.int64)
    ids = np.stack([flat, np.roll(flat, -1, axis=1)], 2).reshape(-1)
    offsets = torch.arange(0, len(ids), 2)
    b = et.Batch(mb)
    b.slots = torch.from_numpy(ids)
    e = et.EmbeddingBagCollection(t, "sum")
    o = e(b, offsets)
    vals = np.array(t.values)[ids].reshape(mb.m, mb.tables, 2, -1).sum(2)
    ref = np.concatenate([vals[:, j, :d] for j, d in enumerate(DIMS)], 1)
    check(o.shape == (mb.m, sum(DIMS)) and np.allclose(o.detach().numpy(), ref, rtol=1e-6,
                                                       atol=1e-7),
          "bags of 2 ids: forward (m, sum d_t), each bag's sum of its first d_t floats")
    before = np.array(t.grads)
    up = torch.randn(o.shape)
    (o * up).sum().backward()
    g = np.zeros((mb.m, mb.tables, t.info["dim"]))
    at = 0
    for j, d in enumerate(DIMS):
        g[:, j, :d] = up.numpy()[:, at:at + d]
        at += d
    want = before.astype(np.float64)
    np.add.at(want, ids, np.repeat(g.reshape(mb.m * mb.tables, 1, -1), 2, 1).reshape(
        len(ids), -1))
    got = np.array(t.grads)
    check(np.allclose(got, want, rtol=1e-5, atol=1e-4),
          "bags of 2 ids: each id gets its bag's gradient in its table's d_t floats")
    t.grads[:] = before


def one_batch(t, mb):
    dim = t.info["dim"]
    check(t.table_dims == DIMS and dim == max(DIMS),
          "the trainer reads each table's dim (%s, rows of %d)" % (t.table_dims, dim))
    rows = np.array(t.values)[mb.slots]
    pad = all(not rows[:, j, d:].any() for j, d in enumerate(DIMS))
    check(pad, "the cache's rows are zero past their table's dim")
    ebc = et.EmbeddingBagCollection(t, "sum")
    out = ebc(et.Batch(mb))
    check(out.shape == (mb.m, sum(DIMS)) and
          np.array_equal(out.detach().numpy(), pooled_ref(t, mb.slots)),
          "forward: (m, %d), each feature its rows' first d_t floats, bit for bit"
          % sum(DIMS))
    parts = ebc.to_dict(out)
    check([parts["f%d" % j].shape[1] for j in range(mb.tables)] == DIMS,
          "to_dict: feature j is (m, d_j)")
    before = np.array(t.grads)
    up = torch.randn(out.shape)
    (out * up).sum().backward()
    want = before.astype(np.float64)
    at = 0
    for j, d in enumerate(DIMS):
        np.add.at(want[:, :d], mb.slots[:, j], up.numpy()[:, at:at + d].astype(np.float64))
        at += d
    got = np.array(t.grads)
    check(np.allclose(got, want, rtol=1e-5, atol=1e-4),
          "backward: gradient slots += the feature's upstream gradient in its d_t floats")
    tails = all(not got[mb.slots[:, j], d:].any() for j, d in enumerate(DIMS))
    check(tails, "backward: the gradient past each table's dim stays exactly zero")
    t.grads[:] = before
    # by name: two features, in the order asked
    named = et.EmbeddingBagCollection(t, "sum", tables=["f15", "f2"])
    o = named(et.Batch(mb))
    ref = pooled_ref(t, mb.slots)
    off = np.cumsum([0] + DIMS)
    want_o = np.concatenate([ref[:, off[15]:off[16]], ref[:, off[2]:off[3]]], 1)
    check(o.shape == (mb.m, 12 + 4) and np.array_equal(o.detach().numpy(), want_o),
          "tables=['f15', 'f2']: (m, 12 + 4), those features in that order")
    ec = et.EmbeddingCollection(t)
    jag = ec(et.Batch(mb))
    check(all(jag["f%d" % j].values.shape == (mb.m, d) for j, d in enumerate(DIMS)) and
          np.array_equal(jag["f19"].values.detach().numpy(), np.array(t.values)[
              mb.slots[:, 19], :12]),
          "EmbeddingCollection: feature j's rows are (n, d_j)")
    bags(t, mb)


def examples(bin_dir, work):
    """run.py --dims: WDL trains and evaluates; DLRM is refused."""
    base = [sys.executable, os.path.join(ROOT, "examples", "pytorch", "run.py"), "--bin",
            bin_dir, "--workers", "2", "--batch", "64", "--dims", ",".join(map(str, DIMS))]
    r = subprocess.run(base + ["--model", "wdl", "--iters", "20", "--eval", "1000", "--work",
                               os.path.join(work, "wdl")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=240)
    m = re.search(r"eval: \d+ held-out samples from \d+, log loss ([0-9.]+)", r.stdout)
    check(r.returncode == 0 and m and 0 < float(m.group(1)) < 1,
          "run.py --model wdl --dims: trains and evaluates (%s)"
          % (m.group(0) if m else r.stdout.strip()[-300:]))
    wd = os.path.join(work, "dlrm")
    r = subprocess.run(base + ["--model", "dlrm", "--iters", "5", "--eval", "0", "--work", wd],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    logs = "".join(open(os.path.join(wd, f)).read() for f in os.listdir(wd)
                   if f.endswith(".log")) if os.path.isdir(wd) else ""
    check(r.returncode != 0 and "DLRM needs one dim for every table" in logs,
          "run.py --model dlrm --dims: refused, its interaction needs equal dims")


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(prefix="esd-torch-dims.")
    stream = os.path.join(work, "stream.esd")
    launcher.gen_stream(bin_dir, stream, 2000, 5)
    s = {"workers.n": 1, "workers.batch": 256, "model.dims": ",".join(map(str, DIMS)),
         "job.iterations": 3, "data.stream": stream, "model.optimizer": "sgd",
         "model.lr": 0.1}
    with Cluster(bin_dir, work, s) as c:
        c.trainers = 0  # this process is the trainer
        c.start()
        c.wait_socket(0)
        t = esd.Trainer(c.node_dir(0))
        mb = t.next(timeout_ms=30000)
        one_batch(t, mb)
        t.commit(mb, 0.0)
        for mb in t:
            rows = np.array(t.values)[mb.slots]
            check(all(not rows[:, j, d:].any() for j, d in enumerate(DIMS)),
                  "iteration %d: rows trained by the runtime stay zero past their dim"
                  % mb.iter)
            t.commit(mb, 0.0)
        t.close()
        c.wait(timeout=60)
    if os.environ.get("ESD_SANITIZED") == "1":
        print("not run: the examples under torchrun (ESD_SANITIZED=1)")
    else:
        examples(bin_dir, work)
    if failures:
        print("%d check(s) failed; files kept in %s" % (len(failures), work))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
