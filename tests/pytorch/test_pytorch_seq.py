"""The sequence model (examples/pytorch/seq.py: EmbeddingCollection's
unpooled rows, to_padded, a target attention per feature, a top MLP)
trained end to end on a local job (1 PS, 2 node daemons, 2 trainers on
each under torchrun: workers.trainers, run.py --trainers) over a stream whose tables 0, 5 and 12 are bags
(multi-hot: empty bags, repeated IDs), against a single-process plain
PyTorch run over the same global batches whose rows are held in one
nn.Embedding(sparse=True) per table, initialised with esd_row_init
(esdio.row_init) and trained by torch.optim.Adagrad (the job's
model.optimizer, adagrad):

  - the job trains every iteration, the loss falls, rank 0 prints AUC;
  - the per-iteration losses match the reference's (1e-4 relative);
  - the final PS checkpoint holds the reference's rows (the same keys),
    their values and Adagrad accumulators within 1e-4 relative + 1e-6
    absolute (test_pytorch_models' rule); the dense weights within 1e-4
    absolute (its reason: Adam over an all-reduce's summation order);
  - evaluate.py on held-out samples gives the reference model's log loss
    and AUC there, and the AUC is above 0.5 (the generated stream's
    labels carry signal);
  - the job told to stop after iteration 5 (it stops at the next
    boundary) and started again ends bit-identical to its uninterrupted
    run: rows, dense weights, losses (test_pytorch_models' resume_case);
    not with ESD_SANITIZED=1 (the sanitizer build: the C side of a stop
    and resume is test_stop_resume's there, the dense model's is Python).

usage: test_pytorch_seq.py BIN_DIR     exit 0 pass, 1 fail, 77 skip
"""
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
import torch_needed  # noqa: E402,F401 - exits 77 without torch

import numpy as np  # noqa: E402
import torch  # noqa: E402

import test_pytorch_models as tpm  # noqa: E402 - the harness: jobs, checks, resume
from test_pytorch_models import check, close, esdio, launcher, train  # noqa: E402
from train import et  # noqa: E402
import seq  # noqa: E402

WORKERS, TRAINERS, BATCH, ITERS, DIM = 2, 2, 32, 20, 8
OPT, LR = "adagrad", 0.05
BAGS = ("0=3:8", "5=1.5:8", "12=4:8")  # at most seq.py's seq_len: no bag is cut
EVAL = 1024  # held-out samples after the trained ones

# resume_case reads the harness's sizes, and its jobs' options from run.py's parser
tpm.WORKERS, tpm.BATCH, tpm.ITERS, tpm.DIM = WORKERS, BATCH, ITERS, DIM
_parser = launcher.parser


def _seq_parser():
    ap = _parser()
    ap.set_defaults(trainers=TRAINERS)
    return ap


launcher.parser = _seq_parser


def args(bin_dir):
    a = launcher.parser().parse_args([])
    a.bin, a.model, a.opt, a.lr = bin_dir, "seq", OPT, LR
    a.workers, a.batch, a.iters, a.dim = WORKERS, BATCH, ITERS, DIM
    a.timeout = 100
    return a


def reference(a, labels, dense, keys, off, T):
    """Plain PyTorch, one process, the same global batches: per table an
    nn.Embedding(sparse=True) over the keys the job trains (esd_row_init
    rows), torch.optim.Adagrad on them, the same dense model and
    optimizer. Returns (sorted keys, their values, accumulators, losses,
    dense weights, the model)."""
    k = WORKERS * BATCH
    n = ITERS * k
    table_of = (keys >> np.uint64(esdio.KEY_ID_BITS)).astype(np.int64)
    uk = [np.unique(keys[:off[n * T]][table_of[:off[n * T]] == t]) for t in range(T)]
    embs = []
    for t in range(T):
        e = torch.nn.Embedding(max(len(uk[t]), 1), DIM, sparse=True)
        with torch.no_grad():
            e.weight[:len(uk[t])] = torch.from_numpy(esdio.row_init(a.seed, uk[t], DIM))
        embs.append(e)
    rows_opt = torch.optim.Adagrad([e.weight for e in embs], lr=LR)
    torch.manual_seed(a.model_seed)
    model = seq.SEQ(T, DIM, dense.shape[1])
    dopt = train.dense_optimizer(model, a.dense_lr, a.dense_opt)
    lens = np.diff(off).reshape(-1, T)
    losses = []
    for it in range(ITERS):
        s = slice(it * k, (it + 1) * k)
        b0, b1 = off[it * k * T], off[(it + 1) * k * T]
        kk, tt = keys[b0:b1], table_of[b0:b1]
        rows = {}
        for t in range(T):  # sample order, bag order within: EmbeddingCollection's
            idx = np.searchsorted(uk[t], kk[tt == t])
            rows["f%d" % t] = et.Jagged(embs[t](torch.from_numpy(idx)),
                                        torch.from_numpy(lens[s, t].copy()), None)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(rows, torch.from_numpy(dense[s])), torch.from_numpy(labels[s]),
            reduction="sum") / k
        dopt.zero_grad()
        rows_opt.zero_grad()
        loss.backward()
        dopt.step()
        rows_opt.step()
        losses.append(loss.item())
    allk = np.concatenate(uk)
    o = np.argsort(allk)
    vals = np.concatenate([e.weight.detach().numpy()[:len(u)] for e, u in zip(embs, uk)])
    acc = np.concatenate([rows_opt.state[e.weight]["sum"].numpy()[:len(u)]
                          if e.weight in rows_opt.state else np.zeros((len(u), DIM), np.float32)
                          for e, u in zip(embs, uk)])
    dense_w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    return allk[o], vals[o], acc[o], np.array(losses), dense_w, model


def check_eval(a, work, stream, rk, rv, rmodel):
    """evaluate.py on the held-out samples against the reference there
    (the harness's check, the rows unpooled), and the AUC above chance."""
    got = tpm.check_eval("seq", a, work, stream, rk, rv, rmodel, samples=EVAL,
                         embed=seq.jagged)
    if got:
        check(got["auc"] > 0.5, "seq: held-out AUC %.4f > 0.5" % got["auc"])


def trained(a, root, stream, data):
    """The uninterrupted job in root/seq, checked against the reference."""
    work = os.path.join(root, "seq")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "progress.log"), "w") as log:
        try:
            ck, _ = launcher.run_job(a, work, stream, out=log)
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            check(False, "seq: job ran (%s)" % e)
            return False
    c = esdio.read_ckpt(ck)
    saved = torch.load(os.path.join(work, "node0", "dense.pt"))
    losses = np.array(saved["losses"])
    dense_w = torch.cat([v.reshape(-1) for v in saved["model"].values()]).numpy()
    with open(os.path.join(work, "progress.log")) as f:
        prog = f.read()
    check(" auc 0." in prog, "seq: rank 0 prints AUC: %s" % prog.strip().splitlines()[-2:])
    both = [os.path.exists(et.dense_path(os.path.join(work, "node%d" % w), i))
            for w in range(WORKERS) for i in range(TRAINERS)]
    check(all(both), "seq: %d nodes x %d trainers each saved the dense model: %s"
          % (WORKERS, TRAINERS, both))
    check(len(losses) == ITERS, "seq: %d iterations trained" % len(losses))
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    check(last < first, "seq: loss falls (mean of first 5 %.4f, last 5 %.4f)" % (first, last))

    rk, rv, racc, rl, rd, rmodel = reference(a, *data)
    ok, ab, re_, _ = close(losses, rl)
    check(ok, "seq: losses == the plain-torch reference's (max abs %.2g, rel %.2g)" % (ab, re_))
    ok, ab, _, _ = close(dense_w, rd, tpm.DENSE_ATOL)
    check(ok, "seq: dense weights == the reference's within %g abs (max abs %.2g)"
          % (tpm.DENSE_ATOL, ab))
    o = np.argsort(c["keys"])
    ck_keys = c["keys"][o]
    same = np.array_equal(ck_keys, rk)
    check(same, "seq: PS rows %d == the reference's nn.Embedding rows %d (same keys)"
          % (len(ck_keys), len(rk)))
    if same:
        ok, ab, re_, bey = close(c["values"][o], rv)
        check(ok, "seq: embedding values == nn.Embedding(sparse=True) + torch.optim.Adagrad's "
              "within %g rel + %g abs (max abs %.2g, rel %.2g; beyond %g rel alone: %s)"
              % (tpm.RTOL, tpm.ATOL, ab, re_, tpm.RTOL, bey))
        ok, ab, re_, bey = close(c["state"][o], racc)
        check(ok, "seq: Adagrad accumulators == torch.optim.Adagrad's state (max abs %.2g, "
              "rel %.2g; beyond %g rel alone: %s)" % (ab, re_, tpm.RTOL, bey))
    check_eval(a, work, stream, rk, rv, rmodel)
    return True


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bin_dir = os.path.abspath(sys.argv[1])
    root = tempfile.mkdtemp(prefix="esd-pytorch-seq.")
    stream = os.path.join(root, "stream.esd")
    launcher.gen_stream(bin_dir, stream, (ITERS + 2) * WORKERS * BATCH + EVAL, 7, BAGS)
    data = esdio.read_bags(stream)
    if trained(args(bin_dir), root, stream, data):
        if os.environ.get("ESD_SANITIZED") == "1":  # the C side: test_stop_resume's
            print("not run: the stop and resume (ESD_SANITIZED=1)")
        else:
            tpm.resume_case(bin_dir, root, stream, "seq", OPT, LR)
    if tpm.failures:
        print("%d check(s) failed; files kept in %s" % (len(tpm.failures), root))
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
