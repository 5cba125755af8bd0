"""The example models (examples/pytorch: DLRM, WDL, DeepFM, DCN) trained
from PyTorch through esd.torch on a local job (1 PS, 4 node daemons, a
trainer on each started by torchrun, DistributedDataParallel over gloo
for the dense part), each against a plain single-process PyTorch run over
the same global batches:

  - the loss decreases; rank 0 prints AUC;
  - evaluate.py on the held-out samples after the trained ones (rows from
    the PS checkpoint, the dense model from dense.pt) gives the log loss
    and AUC of the reference on the same samples;
  - the final PS tables (rows, optimizer state, clocks) equal the
    reference's within 1e-4 relative (plus 1e-6 absolute for elements near
    zero), with the same set of rows and the same clocks;
  - the per-iteration losses match (1e-4 relative);
  - DLRM trains on a stream with bags (multi-hot tables 0, 5 and 12,
    empty bags and repeated IDs included; sum pooling), the other models
    on one-hot features: the same checks, against a reference that pools
    each bag with embedding_bag;
  - DLRM stopped gracefully after iteration 5 and started again ends
    bit-identical to its uninterrupted run (rows, dense weights, losses);
    so does DLRM killed (SIGKILL, every process) after iteration 10 with a
    checkpoint every 4 iterations: the trainers saved the dense model of
    each boundary (the last two kept), evaluate.py evaluates the crashed
    job's last checkpoint as it would a running job's, and the resumed job
    restores the dense model of the checkpoint it resumes from;
  - the dense weights rank 0 saves (NODE_DIR/dense.pt) are close to the
    reference's: within 1e-4 absolute on weights of order 0.1. The
    dense part is trained with Adam, which divides each gradient element
    by its own running magnitude: for an element whose gradient is near
    zero, the summation-order noise of the all-reduce (about 1e-7
    relative) becomes a step of either sign, so these weights drift apart
    by ~1e-5 over 30 steps while the model's outputs (the losses) agree
    to 1e-7.

The reference initialises rows with esd_row_init reimplemented in Python
(esdio.row_init; the first iteration's loss agreeing to 1e-7 and every
final row agreeing to ~1e-6 absolute show the initial rows are the same)
and applies the embedding optimizer of esd/optim.h in float32 once per row
per iteration with the row's summed gradient (summed in double, rounded
once, as the runtime does).

ESD_PYTORCH_MODELS=dlrm,... runs only those models, not the stop and
crash cases (the sanitizer build, where every trainer process runs with
libasan preloaded: the C side of a stop, a crash and a resume is
test_stop_resume's, the trainers' dense model is Python).

usage: test_pytorch_models.py BIN_DIR     exit 0 pass, 1 fail, 77 skip
"""
import os
import shutil
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
EX = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "pytorch"))

import torch_needed  # noqa: E402,F401 - exits 77 without torch

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, EX)
import esdio  # noqa: E402
import evaluate  # noqa: E402
import run as launcher  # noqa: E402
import train  # noqa: E402
from train import et as esd_torch  # noqa: E402

RTOL, ATOL = 1e-4, 1e-6
DENSE_ATOL = 1e-4
WORKERS, BATCH, ITERS, DIM = 4, 32, 30, 8
# One embedding optimizer per model: every rule of esd/optim.h is exercised.
CASES = (("dlrm", "adagrad", 0.05), ("wdl", "adagrad", 0.05), ("deepfm", "adam", 0.01),
         ("dcn", "sgd", 0.5))
BAGS = ("0=3", "5=1.5:6", "12=4:12")  # the multi-hot case's tables
CRASH_EVERY, CRASH_AFTER = 4, 10  # the crash case: checkpoint period, kill point
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def close(a, b, atol=ATOL):
    """(all within |a-b| <= atol + RTOL max(|a|,|b|), max abs, max rel,
    elements beyond RTOL relative alone / elements)"""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape:
        return False, float("inf"), float("inf"), "shape"
    if a.size == 0:
        return True, 0.0, 0.0, "0/0"
    d = np.abs(a - b)
    m = np.maximum(np.abs(a), np.abs(b))
    rel = np.where(m > 0, d / np.where(m > 0, m, 1), 0)
    beyond = "%d/%d" % (int(np.sum(d > RTOL * m)), a.size)
    return bool(np.all(d <= atol + RTOL * m)), float(d.max()), float(rel.max()), beyond


def reference(model_name, opt, lr, a, labels, dense, keys, off, T):
    """Single-process PyTorch over the same global batches: rows from
    esd_row_init, the runtime's embedding optimizer, the same dense model
    and optimizer, each bag pooled by sum. Returns (keys, values, state,
    clocks, losses, dense)."""
    k = WORKERS * BATCH
    n = ITERS * k
    uk, inv = np.unique(keys[:off[n * T]], return_inverse=True)
    values = esdio.row_init(a.seed, uk, DIM)
    eo = esdio.EmbOptim(opt, lr)
    state = eo.init_state(len(uk), DIM)
    clocks = np.zeros(len(uk), np.uint64)
    torch.manual_seed(a.model_seed)
    model = launcher.model_class(model_name)(T, DIM, dense.shape[1])
    dopt = train.dense_optimizer(model, a.dense_lr, a.dense_opt)
    losses = []
    for it in range(ITERS):
        s = slice(it * k, (it + 1) * k)
        b0, b1 = off[it * k * T], off[(it + 1) * k * T]
        idx = inv[b0:b1]
        rows = torch.from_numpy(values[idx]).requires_grad_(True)
        emb = esdio.pool(rows, off[it * k * T:(it + 1) * k * T + 1] - b0, T)
        dopt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(emb, torch.from_numpy(dense[s])), torch.from_numpy(labels[s]),
            reduction="sum") / k
        loss.backward()
        dopt.step()
        losses.append(loss.item())
        g = np.zeros((len(uk), DIM), np.float64)
        np.add.at(g, idx, rows.grad.numpy().astype(np.float64))
        rows = np.unique(idx)
        v, st = values[rows], state[rows]
        eo.apply(v, st, g[rows].astype(np.float32), clocks[rows] + 1)
        values[rows], state[rows] = v, st
        clocks[rows] += 1
    dense_w = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    return uk, values, state, clocks, np.array(losses), dense_w, model


def check_eval(model_name, a, work, stream, rk, rv, rmodel, samples=None, embed=None):
    """evaluate.py on the samples after the trained ones (samples of them,
    or the rest) against the reference model and rows on the same samples;
    embed(rows, off, T) is the reference model's embedding input (default:
    the bags pooled). Returns evaluate.py's figures, or None."""
    try:
        got = evaluate.evaluate(model_name, work, stream, samples=samples, bin_dir=a.bin)
    except ValueError as e:
        check(False, "%s: evaluate.py ran (%s)" % (model_name, e))
        return None
    labels, dense, keys, off, T = evaluate.held_out(stream, ITERS * WORKERS * BATCH, samples)
    rows, _ = evaluate.rows_of(keys, a.seed, rk, rv)
    with torch.no_grad():
        emb = embed(rows, off, T) if embed else esdio.pool(rows, off, T)
        logits = rmodel(emb, torch.from_numpy(dense))
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            logits, torch.from_numpy(labels)).item()
    want_auc = esd_torch.auc(logits.numpy(), labels)
    check(got["samples"] == len(labels) and abs(got["log_loss"] - loss) <= 1e-4 * loss and
          abs(got["auc"] - want_auc) <= 1e-3,
          "%s: held-out evaluation (%d samples from %d): log loss %.5f AUC %.4f, reference's "
          "%.5f %.4f" % (model_name, got["samples"], got["first"], got["log_loss"], got["auc"],
                         loss, want_auc))
    return got


def one(bin_dir, root, stream, data, model_name, opt, lr):
    a = launcher.parser().parse_args([])
    a.bin, a.model, a.opt, a.lr = bin_dir, model_name, opt, lr
    a.workers, a.batch, a.iters, a.dim = WORKERS, BATCH, ITERS, DIM
    a.timeout = 100
    work = os.path.join(root, model_name)
    os.makedirs(work, exist_ok=True)
    log = open(os.path.join(work, "progress.log"), "w")
    try:
        ck, _ = launcher.run_job(a, work, stream, out=log)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check(False, "%s: job ran (%s)" % (model_name, e))
        return
    finally:
        log.close()
    info = subprocess.run([os.path.join(bin_dir, "esd-ref"), "info", ck], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    check(info.returncode == 0, "%s: final checkpoint valid (esd-ref info)" % model_name)
    if info.returncode:
        print(info.stdout)
        return
    c = esdio.read_ckpt(ck)
    saved = torch.load(os.path.join(work, "node0", "dense.pt"))
    losses = np.array(saved["losses"])
    dense_w = torch.cat([v.reshape(-1) for v in saved["model"].values()]).numpy()
    with open(os.path.join(work, "progress.log")) as f:
        prog = f.read()
    check(" auc 0." in prog, "%s: rank 0 prints AUC: %s" % (model_name,
                                                          prog.strip().splitlines()[-2:]))

    rk, rv, rs, rc, rl, rd, rmodel = reference(model_name, opt, lr, a, *data)
    check_eval(model_name, a, work, os.path.join(os.path.dirname(work), "stream.esd"),
               rk, rv, rmodel)
    check(len(losses) == ITERS, "%s: %d iterations trained" % (model_name, len(losses)))
    first, last = float(np.mean(losses[:8])), float(np.mean(losses[-8:]))
    check(last < first, "%s: loss decreases (mean of first 8 %.4f, last 8 %.4f)"
          % (model_name, first, last))
    ok, ab, re_, _ = close(losses, rl)
    check(ok, "%s: losses == reference's (max abs %.2g, rel %.2g)" % (model_name, ab, re_))
    ok, ab, re_, _ = close(dense_w, rd, DENSE_ATOL)
    check(ok, "%s: dense weights == reference's within %g abs (max abs %.2g)"
          % (model_name, DENSE_ATOL, ab))

    o = np.argsort(c["keys"])
    ck_keys = c["keys"][o]
    check(np.array_equal(ck_keys, rk), "%s: PS rows %d == reference rows %d (same keys)"
          % (model_name, len(ck_keys), len(rk)))
    if not np.array_equal(ck_keys, rk):
        return
    check(np.array_equal(c["clocks"][o], rc), "%s: row clocks equal" % model_name)
    ok, ab, re_, bey = close(c["values"][o], rv)
    check(ok, "%s: %s embedding values within %g rel + %g abs (max abs %.2g, rel %.2g; "
          "beyond %g rel alone: %s elements; %d rows)"
          % (model_name, opt, RTOL, ATOL, ab, re_, RTOL, bey, len(rk)))
    ok, ab, re_, bey = close(c["state"][o], rs)
    check(ok, "%s: %s optimizer state within %g rel + %g abs (max abs %.2g, rel %.2g; "
          "beyond %g rel alone: %s)" % (model_name, opt, RTOL, ATOL, ab, re_, RTOL, bey))


def check_crashed(model_name, work, stopped):
    """After the crash: the trainers' dense model of the last checkpoint,
    and evaluate.py on that checkpoint as on a job still running."""
    p = os.path.join(work, "node0", "dense@%d.pt" % stopped)
    saved = torch.load(p) if os.path.exists(p) else {}
    check(CRASH_EVERY <= stopped < ITERS and stopped % CRASH_EVERY == 0 and
          saved.get("iteration") == stopped,
          "%s: killed after iteration %d; the last checkpoint is of iteration %d, and so is "
          "its dense model (%s)" % (model_name, CRASH_AFTER, stopped, os.path.basename(p)))
    left = sorted(f for f in os.listdir(os.path.join(work, "node0")) if f.startswith("dense@"))
    check(len(left) <= 2, "%s: the trainers keep the last two boundaries' dense models: %s"
          % (model_name, left))
    try:
        got = evaluate.evaluate(model_name, work, os.path.join(os.path.dirname(work),
                                                              "stream.esd"), samples=128)
        check(got["iteration"] == stopped and got["samples"] == 128,
              "%s: evaluate.py on the checkpoint of iteration %d mid-job: log loss %.5f, "
              "AUC %.4f" % (model_name, got["iteration"], got["log_loss"], got["auc"]))
    except ValueError as e:
        check(False, "%s: evaluate.py on the crashed job's checkpoint (%s)" % (model_name, e))


def resume_case(bin_dir, root, stream, model_name="dlrm", opt="adagrad", lr=0.05, crash=False):
    """The job stopped gracefully (esdctl stop after iteration 5), or
    killed after iteration CRASH_AFTER with a checkpoint every CRASH_EVERY,
    and started again: the trainers restore the dense model of the
    checkpoint's iteration and the job ends where the uninterrupted run
    did, bit for bit (rows, dense weights, losses)."""
    a = launcher.parser().parse_args([])
    a.bin, a.model, a.opt, a.lr = bin_dir, model_name, opt, lr
    a.workers, a.batch, a.iters, a.dim = WORKERS, BATCH, ITERS, DIM
    a.timeout = 100
    a.checkpoint_every = CRASH_EVERY if crash else 0
    work = os.path.join(root, model_name + ("-crash" if crash else "-resume"))
    os.makedirs(work, exist_ok=True)
    log = open(os.path.join(work, "progress.log"), "w")
    try:
        if crash:
            launcher.run_job(a, work, stream, out=log, crash_after=CRASH_AFTER)
            stopped = esdio.read_ckpt(os.path.join(work, "ckpt", "ps-shard0.ckpt"))["iter"]
            check_crashed(model_name, work, stopped)
        else:
            launcher.run_job(a, work, stream, out=log, stop_after=5)
            stopped = esdio.read_ckpt(os.path.join(work, "ckpt", "ps-shard0.ckpt"))["iter"]
            saved = torch.load(os.path.join(work, "node0", "dense.pt"))
            check(5 < stopped < ITERS and saved["iteration"] == stopped,
                  "%s: stopped gracefully after iteration %d, dense.pt of iteration %s"
                  % (model_name, stopped, saved["iteration"]))
        launcher.run_job(a, work, stream, out=log, resume=True)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check(False, "%s: %s and resume ran (%s)" % (model_name, "crash" if crash else "stop",
                                                    e))
        return
    finally:
        log.close()
    with open(os.path.join(work, "progress.log")) as f:
        check("resumed the dense model of iteration %d" % stopped in f.read(),
              "%s: the second start restored the dense model" % model_name)
    got = esdio.read_ckpt(os.path.join(work, "ckpt", "ps-shard0.ckpt"))
    want = esdio.read_ckpt(os.path.join(root, model_name, "ckpt", "ps-shard0.ckpt"))
    og, ow = np.argsort(got["keys"]), np.argsort(want["keys"])  # rows in key order
    same = all(np.array_equal(got[f][og], want[f][ow])
               for f in ("keys", "clocks", "values", "state"))
    check(same and got["iter"] == ITERS, "%s: %s and resumed, the final rows are "
          "bit-identical to the uninterrupted run's" % (model_name,
                                                         "crashed" if crash else "stopped"))
    g = torch.load(os.path.join(work, "node0", "dense.pt"))
    w = torch.load(os.path.join(root, model_name, "node0", "dense.pt"))
    check(all(torch.equal(g["model"][k], w["model"][k]) for k in w["model"]) and
          g["losses"] == w["losses"], "%s: and so are the dense weights and the %d losses"
          % (model_name, len(w["losses"])))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    bin_dir = os.path.abspath(sys.argv[1])
    if os.path.realpath(sys.executable) != os.path.realpath(PY):
        print("note: running under %s" % sys.executable)
    root = tempfile.mkdtemp(prefix="esd-pytorch-test.")
    stream = os.path.join(root, "stream.esd")
    launcher.gen_stream(bin_dir, stream, (ITERS + 2) * WORKERS * BATCH, 7)
    bags_dir = os.path.join(root, "bags")  # DLRM's: a stream with bags
    os.makedirs(bags_dir)
    bags = os.path.join(bags_dir, "stream.esd")
    launcher.gen_stream(bin_dir, bags, (ITERS + 2) * WORKERS * BATCH, 7, BAGS)
    only = os.environ.get("ESD_PYTORCH_MODELS")  # the sanitizer build: fewer, same checks
    for model_name, opt, lr in CASES:
        if only and model_name not in only.split(","):
            print("not run: %s (ESD_PYTORCH_MODELS=%s)" % (model_name, only))
            continue
        if model_name == "dlrm":
            print("-- dlrm on a stream with bags (%s)" % " ".join(BAGS), flush=True)
            one(bin_dir, bags_dir, bags, esdio.read_bags(bags), model_name, opt, lr)
        else:
            one(bin_dir, root, stream, esdio.read_bags(stream), model_name, opt, lr)
    if only:
        print("not run: the stop and crash cases (ESD_PYTORCH_MODELS=%s)" % only)
    else:
        resume_case(bin_dir, bags_dir, bags)
        resume_case(bin_dir, bags_dir, bags, crash=True)
    if failures:
        print("%d check(s) failed; files kept in %s" % (len(failures), root))
        return 1
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
