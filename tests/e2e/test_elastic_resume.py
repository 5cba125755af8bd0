"""Resize on resume (ps.resume_from): a job checkpointed with S shards and n
workers resumes with S' shards and n' workers. Each new shard takes the
rows whose keys hash to it from every old shard file, with their optimizer
state and clocks, shard 0 the dense table; the nodes start cold; the data
cursor goes on from the checkpoint's. The resumed job's final tables equal
esd-ref started from the same checkpoint directory with the new global
batch (within the bsp-exact tolerance, clocks included):
- 2 -> 3 shards and 3 -> 2 shards (4 workers);
- 4 -> 2 workers (global batch 128 -> 64: the cursor is not iteration * k);
- a resumed job stopped and started again resumes from its own checkpoint;
- a checkpoint with a shard file missing, or of two cuts, is refused
  naming the file.

usage: test_elastic_resume.py BIN_DIR
"""
import os
import shutil
import subprocess
import sys

from e2e_util import Env, ClusterError, shard_files
from esdcluster import Cluster, write_ini

FIRST = 20  # iterations of the job that writes the checkpoint
TOTAL = 40  # iterations of the resumed job (the total)


def first_job(env, name, shards, n):
    """A job of FIRST iterations with shards and n workers; its checkpoint
    directory (written at the end)."""
    s = env.settings(**{"workers.n": n, "job.iterations": FIRST})
    ck, _ = env.run(name, s, shards=shards)
    return os.path.dirname(ck.split(",")[0])


def resumed_job(env, name, old_ck, shards, n):
    """The job resumed from old_ck with shards and n workers to TOTAL
    iterations; (its checkpoint files, its settings, the node log)."""
    s = env.settings(**{"workers.n": n, "job.iterations": TOTAL, "ps.resume_from": old_ck})
    work, ck = env.run_dirs(s, name)
    with Cluster(env.bin, work, s, shards=shards) as c:
        c.start(resume=True)
        c.wait(timeout=120)
        sums = c.summaries()
    env.check(all(sm["iterations"] == TOTAL for sm in sums),
              "%s: every node trains to iteration %d" % (name, TOTAL))
    with open(os.path.join(work, "esdd0.log")) as f:
        log = f.read()
    return shard_files(ck, shards), s, log


def reference(env, name, s, old_ck):
    """esd-ref from the checkpoint directory old_ck with s's global batch."""
    out = os.path.join(env.root, name + ".ref.ckpt")
    k = int(s["workers.batch"]) * int(s["workers.n"])
    r = subprocess.run([os.path.join(env.bin, "esd-ref"), "--out", out, "--stream",
                        s["data.stream"], "--iters", str(TOTAL), "--batch", str(k),
                        "--seed", str(s["job.seed"]), "--dim", str(s["model.dim"]),
                        "--hidden", str(s["model.hidden"]), "--opt", s["model.optimizer"],
                        "--lr", str(s["model.lr"]), "--resume", old_ck],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    env.check(r.returncode == 0, "%s: esd-ref resumes from %s: %s"
              % (name, old_ck, r.stdout.strip()[-300:]))
    return out


def resize(env, name, old_ck, shards, n):
    ck, s, log = resumed_job(env, name, old_ck, shards, n)
    env.check("cold cache" in log, "%s: the node starts cold: %s" % (
        name, [ln for ln in log.splitlines() if "cold cache" in ln][:1]))
    ref = reference(env, name, s, old_ck)
    ok, out = env.compare(ck, ref)
    env.check(ok, "%s: final tables == esd-ref from the same checkpoint (rtol 1e-5, atol "
              "2e-6, clocks and optimizer state): %s"
              % (name, out.splitlines()[-1] if out else ""))
    return ck


def ps_start_fails(env, s, name):
    """esd-ps shard 0 with settings s, started to resume: (exit code, log)."""
    work = os.path.join(env.root, name)
    os.makedirs(work, exist_ok=True)
    job = os.path.join(work, "job.ini")
    write_ini(job, dict(s, **{"job.insecure": "yes"}))
    try:
        r = subprocess.run([os.path.join(env.bin, "esd-ps"), "--config", job, "--shard", "0",
                            "--listen", "127.0.0.1:0", "--resume"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
    except subprocess.TimeoutExpired as e:
        return "timeout", str(e.output)
    return r.returncode, r.stdout


def refusals(env, ck2, ck3):
    """A checkpoint directory missing a shard file, one mixing two jobs'
    files, and ps.resume_from naming ps.checkpoint_dir."""
    bad = os.path.join(env.root, "missing")
    shutil.copytree(ck2, bad)
    os.remove(os.path.join(bad, "ps-shard1.ckpt"))
    s = env.settings(**{"job.iterations": TOTAL, "ps.resume_from": bad,
                        "ps.checkpoint_dir": os.path.join(env.root, "missing-new")})
    os.makedirs(s["ps.checkpoint_dir"], exist_ok=True)
    rc, out = ps_start_fails(env, s, "missing-ps")
    line = [ln for ln in out.splitlines() if "ps-shard1.ckpt" in ln]
    env.check(rc not in (0, "timeout") and line and "missing" in line[0],
              "a checkpoint without ps-shard1.ckpt is refused naming it (exit %s): %s"
              % (rc, line[:1]))
    mixed = os.path.join(env.root, "mixed")
    shutil.copytree(ck2, mixed)
    shutil.copy(os.path.join(ck3, "ps-shard1.ckpt"), os.path.join(mixed, "ps-shard1.ckpt"))
    s["ps.resume_from"] = mixed
    rc, out = ps_start_fails(env, s, "mixed-ps")
    line = [ln for ln in out.splitlines() if "does not belong" in ln]
    env.check(rc not in (0, "timeout") and line and "ps-shard1.ckpt" in line[0],
              "a checkpoint whose ps-shard1.ckpt is of another job's cut is refused naming "
              "it (exit %s): %s" % (rc, line[:1]))
    s["ps.resume_from"] = s["ps.checkpoint_dir"]
    rc, out = ps_start_fails(env, s, "same-dir-ps")
    env.check(rc not in (0, "timeout") and "is ps.checkpoint_dir too" in out,
              "ps.resume_from = ps.checkpoint_dir is refused (exit %s)" % rc)


def main():
    env = Env(sys.argv[1], "elastic-resume")
    env.gen_stream()
    try:
        ck2 = first_job(env, "first-2-shards", 2, 4)
        resize(env, "2-to-3-shards", ck2, 3, 4)
        ck3 = first_job(env, "first-3-shards", 3, 4)
        resize(env, "3-to-2-shards", ck3, 2, 4)
        ck4 = first_job(env, "first-4-workers", 1, 4)
        resize(env, "4-to-2-workers", ck4, 2, 2)
        refusals(env, ck2, ck3)
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
