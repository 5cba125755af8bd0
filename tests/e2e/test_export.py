"""Export for serving and warm start (tools/esd-export, ps.warm_start):
- a job of 2 shards trains to its end; its export has one [rows, dim]
  float32 .npy per table of the stream, every trained row the
  checkpoint's value bit for bit, every other row its initial value, and
  the dense table as the C model's tensors;
- a new job of 3 shards with another seed starts from that export
  (ps.warm_start) and trains with SGD at the smallest positive learning
  rate (a step that moves no value: the tables pass through a real job
  unchanged); its export is bit-identical to the first, file for file;
- a shard refuses an export that does not match, naming the file and the
  mismatch: a manifest of 25 tables for a stream of 26, a truncated table, a table of another dim, a non-finite
  value, a dense tensor of another size, a job of another model.dim.

usage: test_export.py BIN_DIR
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is missing (python3-numpy): skipped")
    sys.exit(77)

from e2e_util import Env, shard_files
from esdcluster import Cluster, write_ini

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EXPORT = os.path.join(ROOT, "tools", "esd-export")
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
import esdio  # noqa: E402


def run_job(env, name, settings, shards):
    work, ck = env.run_dirs(settings, name)
    with Cluster(env.bin, work, settings, shards=shards) as c:
        c.start()
        c.wait(timeout=120)
    return work, ck


def export(env, ck, out):
    r = subprocess.run([sys.executable, EXPORT, ck, out, "--stream", env.stream, "--bin",
                        env.bin], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    env.check(r.returncode == 0, "esd-export %s: %s" % (out, r.stdout.strip()))
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def check_first_export(env, ck, out, man, shards):
    cks = [esdio.read_ckpt(p) for p in shard_files(ck, shards).split(",")]
    keys = np.concatenate([c["keys"] for c in cks])
    values = np.concatenate([c["values"] for c in cks])
    seed, dim = cks[0]["seed"], cks[0]["dim"]
    ok_trained, ok_init, ntables = True, True, len(man["tables"])
    for t, tab in enumerate(man["tables"]):
        a = np.load(os.path.join(out, tab["file"]))
        sel = (keys >> np.uint64(48)) == t
        ids = (keys[sel] & np.uint64((1 << 48) - 1)).astype(np.int64)
        ok_trained &= a.dtype == np.float32 and a.shape == (tab["rows"], dim) and \
            np.array_equal(a[ids].view(np.uint32), values[sel].view(np.uint32))
        untrained = np.setdiff1d(np.arange(a.shape[0]), ids)[:50]
        ok_init &= np.array_equal(a[untrained].view(np.uint32), esdio.row_init(
            seed, esdio.key_make(t, untrained), dim).view(np.uint32))
    env.check(ntables == 26 and man["dim"] == dim and
              sum(t["trained_rows"] for t in man["tables"]) == len(keys),
              "the export has the stream's 26 tables of dim %d, %d trained rows"
              % (dim, len(keys)))
    env.check(ok_trained, "every trained row of the export is the checkpoint's, bit for bit")
    env.check(ok_init, "an untrained row of the export is its initial value (esd_row_init)")
    d = man.get("dense", {})
    flat = np.concatenate([np.load(os.path.join(out, d["files"][k])).reshape(-1)
                           for k in ("W1", "b1", "w2", "b2", "wd")]) if d else None
    dense = [c["dense"] for c in cks if len(c["dense"])][0]
    env.check(flat is not None and np.array_equal(flat.view(np.uint32), dense.view(np.uint32)),
              "the dense tensors W1 %s, b1, w2, b2, wd are the checkpoint's dense table"
              % (np.load(os.path.join(out, d["files"]["W1"])).shape if d else None,))


def test_round_trip(env):
    s = env.settings(workers__n=2, job__iterations=40)
    _, ck1 = run_job(env, "train", s, shards=2)
    exp1 = os.path.join(env.root, "export1")
    man1 = export(env, ck1, exp1)
    check_first_export(env, ck1, exp1, man1, 2)
    # the warm-started job: other seed, other shard count, steps that move nothing
    s2 = env.settings(workers__n=2, job__iterations=5, job__seed=99, model__optimizer="sgd",
                      model__lr="1e-45")
    s2["ps.warm_start"] = exp1
    work2, ck2 = run_job(env, "warm", s2, shards=3)
    with open(os.path.join(work2, "ps1.log")) as f:
        log = [ln.strip() for ln in f if "warm start from" in ln]
    env.check(len(log) == 1, "shard 1 of the new job loaded the export: %s" % log[:1])
    exp2 = os.path.join(env.root, "export2")
    man2 = export(env, ck2, exp2)
    files = sorted(os.path.relpath(os.path.join(d, f), exp1) for d, _, fs in os.walk(exp1)
                   for f in fs if f != "manifest.json")
    same = [f for f in files if filecmp.cmp(os.path.join(exp1, f), os.path.join(exp2, f),
                                            shallow=False)]
    env.check(len(files) == 31 and same == files,
              "export -> warm start (3 shards, seed 99) -> export: %d of %d files "
              "bit-identical" % (len(same), len(files)))
    env.check([(t["file"], t["rows"], t["dim"]) for t in man1["tables"]] ==
              [(t["file"], t["rows"], t["dim"]) for t in man2["tables"]],
              "both manifests list the same tables, rows and dim")
    return s, exp1


def ps_start(env, settings, name):
    """esd-ps shard 0 of a job alone: (exit status, its output); a shard
    that refuses its export exits before it listens."""
    work = os.path.join(env.root, name)
    os.makedirs(work, exist_ok=True)
    ini = os.path.join(work, "job.ini")
    s = dict(settings, **{"job.insecure": "yes"})
    s.pop("ps.checkpoint_dir", None)
    write_ini(ini, s)
    p = subprocess.Popen([os.path.join(env.bin, "esd-ps"), "--config", ini, "--shard", "0",
                          "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # it listened: the export was taken
        p.kill()
        out, _ = p.communicate()
        return None, out
    return p.returncode, out


def broken_copy(env, exp, name, change):
    out = os.path.join(env.root, name)
    shutil.copytree(exp, out)
    change(out)
    return out


def test_refusals(env, s, exp):
    with open(os.path.join(exp, "manifest.json")) as f:
        big = max(json.load(f)["tables"], key=lambda t: t["rows"])["file"]

    def truncate(d):
        p = os.path.join(d, "table_03.npy")
        os.truncate(p, os.path.getsize(p) - 4)

    def wrong_dim(d):
        a = np.load(os.path.join(d, "table_05.npy"))
        np.save(os.path.join(d, "table_05.npy"), np.zeros((a.shape[0], a.shape[1] + 1),
                                                          np.float32))

    def nan(d):
        p = os.path.join(d, big)
        a = np.load(p)
        a[3, 1] = np.nan
        np.save(p, a)

    def dense(d):
        np.save(os.path.join(d, "dense", "b1.npy"), np.zeros(3, np.float32))

    def tables(d):
        p = os.path.join(d, "manifest.json")
        with open(p) as f:
            m = json.load(f)
        m["tables"].pop()
        with open(p, "w") as f:
            json.dump(m, f)

    cases = [("tables", tables, {}, ["manifest.json", "25 tables but data.stream", "has 26"]),
             ("truncated", truncate, {}, ["table_03.npy", "truncated"]),
             ("wrong-dim", wrong_dim, {}, ["table_05.npy", "shape (", "but the job's table 5"]),
             ("nan", nan, {}, [big, "element 25 is not finite"]),
             ("dense", dense, {}, ["b1.npy", "b1 of 3 floats"]),
             ("job-dim", None, {"model.dim": 16}, ["manifest.json", "dim 8", "model.dim is 16"])]
    for name, change, over, want in cases:
        d = broken_copy(env, exp, "bad-" + name, change) if change else exp
        rc, out = ps_start(env, dict(s, **{"ps.warm_start": d}, **over), "ps-" + name)
        line = [ln for ln in out.splitlines() if "ps.warm_start" in ln]
        env.check(rc not in (None, 0) and line and all(w in line[0] for w in want),
                  "%s: the shard refuses to start (exit %s): %s" % (name, rc, line[:1]))


def main():
    env = Env(sys.argv[1], "export")
    env.gen_stream()
    s, exp = test_round_trip(env)
    test_refusals(env, s, exp)
    if env.failures:
        print("%d check(s) failed; files in %s" % (len(env.failures), env.root))
        sys.exit(1)
    shutil.rmtree(env.root, ignore_errors=True)


if __name__ == "__main__":
    main()
