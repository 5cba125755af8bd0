"""Incremental checkpoints (esd/ckpt.h, Increments): a job that
checkpoints every 2 iterations writes a full base and then increments
of the rows changed since the checkpoint before; every reader (esd-ref
compare and info, esd-export, esdio.read_ckpt, esd-ps --resume,
ps.resume_from) reads base plus increments as one full checkpoint:
- a run checkpointing every 2 iterations ends bit-identical to one that
  writes a single full checkpoint at its end, and its increments are
  smaller than the base;
- kill -9 of every process and the same start: it resumes from the newest
  base plus increments, bit-identical at the end;
- esd-export of the chain equals esd-export of the full checkpoint, and
  esdio.read_ckpt reads the same rows;
- ps.resume_from of a chain directory starts a job from it;
- old chains are removed: the files stay bounded.

usage: test_incremental_ckpt.py BIN_DIR
"""
import glob
import os
import signal
import subprocess
import sys

from e2e_util import Env, ClusterError, shard_files, wait_ps
from esdcluster import Cluster

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
ITERS = 120

try:
    import numpy as np
    import esdio
except ImportError:
    np = None


def chain_files(ck, shard=0):
    return sorted(glob.glob(os.path.join(ck, "ps-shard%d.ckpt.*" % shard)))


def test_chain_run(env, s, full):
    """Checkpoints every 2 iterations: increments, exact at the end."""
    s = dict(s)
    s["ps.checkpoint_every"] = 2
    ck, _ = env.run("chain", s, shards=2)
    d = os.path.dirname(ck.split(",")[0])
    files = chain_files(d)
    incs = [f for f in files if ".inc" in f]
    bases = [f for f in files if ".base" in f]
    env.check(incs and bases and len(files) <= 2 * 17,
              "a base and increments, old chains removed: %s" % [os.path.basename(f)
                                                                for f in files])
    env.check(max(os.path.getsize(f) for f in incs) < max(os.path.getsize(f) for f in bases),
              "an increment is smaller than a full checkpoint")
    info = subprocess.run([os.path.join(env.bin, "esd-ref"), "info", ck.split(",")[0]],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.check(info.returncode == 0 and str(ITERS) in info.stdout,
              "esd-ref info reads the chain: %s" % info.stdout.strip().splitlines()[:2])
    ok, out = env.compare(ck, full, exact=True)
    env.check(ok, "base + increments == the full checkpoint, bit for bit: %s"
              % out.splitlines()[-1:])
    return ck


def test_kill_resume(env, s, full):
    """kill -9 mid-run, then the same start resumes from the chain."""
    work = os.path.join(env.root, "killall")
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s = dict(s)
    s["ps.checkpoint_dir"] = ck
    s["ps.checkpoint_every"] = 2
    with Cluster(env.bin, work, s, shards=2) as c:
        c.start()
        got = wait_ps(os.path.join(work, "ps0.sock"), 47)
        for p in c.procs.values():
            p.send_signal(signal.SIGKILL)
        for p in c.procs.values():
            p.wait()
    env.check(got >= 47 and any(".inc" in f for f in chain_files(ck)),
              "killed at iteration %d with increments on disk" % got)
    with Cluster(env.bin, work, s, shards=2) as c:
        c.start(resume=True)
        c.wait(timeout=120)
    ok, out = env.compare(shard_files(ck, 2), full, exact=True)
    env.check(ok, "resumed from base + increments, bit-identical at the end: %s"
              % out.splitlines()[-1:])


def test_readers(env, chain, full):
    """esdio.read_ckpt and esd-export read the chain as the full file."""
    if np is None:
        print("SKIP python readers: numpy missing")
        return
    for a, b in zip(chain.split(","), full.split(",")):
        ca, cb = esdio.read_ckpt(a), esdio.read_ckpt(b)
        oa, ob = np.argsort(ca["keys"]), np.argsort(cb["keys"])  # runs create rows in any order
        same = all(np.array_equal(ca[f][oa], cb[f][ob]) for f in
                   ("keys", "clocks", "values", "state")) and \
            all(np.array_equal(ca[f], cb[f]) for f in ("dense", "dense_state"))
        env.check(same and ca["iter"] == cb["iter"],
                  "esdio.read_ckpt of %s equals the full file" % os.path.basename(a))
    outs = []
    for name, ck in (("chain", chain), ("full", full)):
        out = os.path.join(env.root, "export-" + name)
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "esd-export"),
                            os.path.dirname(ck.split(",")[0]), out, "--stream", env.stream,
                            "--bin", env.bin], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        env.check(r.returncode == 0, "esd-export of the %s: %s" % (name, r.stdout.strip()[-300:]))
        outs.append(out)
    a = sorted(glob.glob(os.path.join(outs[0], "**", "*.npy"), recursive=True))
    b = sorted(glob.glob(os.path.join(outs[1], "**", "*.npy"), recursive=True))
    env.check(len(a) == len(b) and a and
              all(np.array_equal(np.load(x), np.load(y)) for x, y in zip(a, b)),
              "esd-export of base + increments equals that of the full checkpoint (%d files)"
              % len(a))


def test_resume_from(env, s, chain):
    """ps.resume_from of a directory of chains."""
    s = dict(s)
    s["ps.resume_from"] = os.path.dirname(chain.split(",")[0])
    s["job.iterations"] = ITERS + 10
    ck, sums = env.run("resume-from", s, shards=2)
    env.check(all(sm["iterations"] == ITERS + 10 for sm in sums),
              "ps.resume_from of base + increments trains on to %d" % (ITERS + 10))


def main():
    env = Env(sys.argv[1], "incr-ckpt")
    env.gen_stream(samples=20000)
    s = env.settings(job__iterations=ITERS)
    try:
        full, _ = env.run("full", s, shards=2)
        chain = test_chain_run(env, s, full)
        test_readers(env, chain, full)
        test_kill_resume(env, s, full)
        test_resume_from(env, s, chain)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
