"""What every process checks at start rather than fail later:
- ps.checkpoint_dir (esd-ps) or workers.checkpoint_dir (esdd) that does
  not exist, or that this process cannot write (a read-only mount): the
  process exits non-zero within a second, naming the setting and the path;
- a job whose memory plan does not fit this machine (esdctl plan says DOES
  NOT FIT): esd-ps (its shard), esdd (its node) and esd-launch refuse to
  start, printing the plan's figures; with job.force_plan = true the same
  job runs to its end;
- a stream shorter than iterations x global batch: esd-ps, every esdd and
  esd-ref say how many passes the job makes, and the runtime's final
  tables equal esd-ref's over the same wrapped-around stream (rtol 1e-5,
  as test_bsp_exact compares them).

usage: test_start_checks.py BIN_DIR
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

from e2e_util import Env

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "launch", "esd-launch"))
PY = "/usr/bin/python3"
START_LIMIT_S = 1.0


def write_job(path, settings):
    sections = {}
    for k, v in settings.items():
        sec, key = k.split(".", 1)
        sections.setdefault(sec, []).append("%s = %s" % (key, v))
    with open(path, "w") as f:
        for sec, lines in sections.items():
            f.write("[%s]\n%s\n" % (sec, "\n".join(lines)))


def timed(argv, timeout=30, cwd=None):
    """Run argv: (rc, output, seconds)."""
    t0 = time.time()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, cwd=cwd)
    return r.returncode, r.stdout, time.time() - t0


def readonly_wrap(path):
    """A prefix that runs a command with path read-only: as root, a bind
    mount read-only in a private mount namespace (root writes through
    modes); otherwise mode 0500. None where neither works."""
    if os.geteuid() != 0:
        os.chmod(path, 0o500)
        return []
    if shutil.which("unshare") is None:
        return None
    mount = "mount --bind -o ro %s %s" % (path, path)
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "%s && touch %s/x" % (mount, path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode == 0:
        return None  # mounted, but still writable
    ok = subprocess.run(["unshare", "-m", "sh", "-c", mount], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL)
    if ok.returncode:
        return None  # no mount namespace here
    return ["unshare", "-m", "sh", "-c", mount + ' && exec "$0" "$@"']


def test_checkpoint_dirs(env, base):
    job = os.path.join(env.root, "ckdir.ini")
    write_job(job, base)
    missing = os.path.join(env.root, "no", "such", "ckpt")
    esd_ps = [os.path.join(env.bin, "esd-ps"), "--config", job]
    rc, out, took = timed(esd_ps + ["--set", "ps.checkpoint_dir=" + missing])
    env.check(rc != 0 and took <= START_LIMIT_S and "ps.checkpoint_dir" in out and
              missing in out and "mkdir -p" in out,
              "esd-ps with a ps.checkpoint_dir that does not exist: exit %d in %.2f s, "
              "naming it: %s" % (rc, took, last_error(out)))
    # esdd writes its part of a checkpoint where the job checkpoints
    shard_ck = os.path.join(env.root, "ckdir-ps")
    os.makedirs(shard_ck)
    node = os.path.join(env.root, "node0")
    esdd = [os.path.join(env.bin, "esdd"), "--config", job, "--rank", "0", "--dir", node,
            "--set", "ps.checkpoint_dir=" + shard_ck]
    rc, out, took = timed(esdd + ["--set", "workers.checkpoint_dir=" + missing])
    env.check(rc != 0 and took <= START_LIMIT_S and "workers.checkpoint_dir" in out and
              missing in out,
              "esdd with a workers.checkpoint_dir that does not exist: exit %d in %.2f s, "
              "naming it: %s" % (rc, took, last_error(out)))

    ro = os.path.join(env.root, "readonly")
    os.makedirs(ro)
    wrap = readonly_wrap(ro)
    if wrap is None:
        print("not run: the read-only cases (no read-only bind mount here)")
        return
    # the wrapper's own start is in the bound: the goal is the process's
    rc, out, took = timed(wrap + esd_ps + ["--set", "ps.checkpoint_dir=" + ro])
    env.check(rc != 0 and took <= START_LIMIT_S and "not writable" in out and ro in out,
              "esd-ps with a read-only ps.checkpoint_dir: exit %d in %.2f s, naming it: %s"
              % (rc, took, last_error(out)))
    rc, out, took = timed(wrap + esdd + ["--set", "workers.checkpoint_dir=" + ro])
    env.check(rc != 0 and took <= START_LIMIT_S and "not writable" in out and ro in out,
              "esdd with a read-only workers.checkpoint_dir: exit %d in %.2f s, naming it: %s"
              % (rc, took, last_error(out)))


def last_error(out):
    lines = [ln for ln in out.splitlines() if "ERROR" in ln or "esd-launch:" in ln]
    return (lines or out.strip().splitlines() or [""])[-1][-300:]


def plan_json(env, job, sets):
    argv = [os.path.join(env.bin, "esdctl"), "--json", "plan"]
    for s in sets:
        argv += ["--set", s]
    r = subprocess.run(argv + [job], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, check=True)
    return json.loads(r.stdout)


def too_big_dim(env, job):
    """The smallest power-of-two model.dim whose PS shard does not fit this
    machine twice over (None: not even the largest)."""
    dim = 64
    while dim <= 4096:
        doc = plan_json(env, job, ["model.dim=%d" % dim])
        if doc["esd_ps"]["shards"][0]["total"] > 2 * doc["mem_available_bytes"]:
            return dim
        dim *= 2
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_plan(env, base):
    """A stream whose header declares Criteo's full tables (33.8 M rows):
    the PS shard's rows at a large dim exceed this machine's memory, while
    the few rows a short run touches fit."""
    big = os.path.join(env.root, "big.esd")
    subprocess.run([os.path.join(env.bin, "esd-data"), "gen", "-o", big, "--shape",
                    "criteo-kaggle", "-n", "2000", "--seed", "5"], check=True,
                   stdout=subprocess.DEVNULL)
    s = dict(base, **{"data.stream": big, "workers.n": 1, "workers.batch": 16,
                      "job.iterations": 5, "cache.rows": 16 * 26 * 2,
                      "model.optimizer": "sgd"})
    job = os.path.join(env.root, "plan.ini")
    write_job(job, s)
    dim = too_big_dim(env, job)
    if dim is None:
        print("not run: the plan cases (this machine holds even model.dim = 4096)")
        return
    dset = "model.dim=%d" % dim
    doc = plan_json(env, job, [dset])
    env.check(doc["fits"] is False, "esdctl plan at model.dim = %d: DOES NOT FIT (a shard "
              "needs %.1f GiB, MemAvailable %.1f GiB)"
              % (dim, doc["esd_ps"]["shards"][0]["total"] / 2**30,
                 doc["mem_available_bytes"] / 2**30))

    esd_ps = [os.path.join(env.bin, "esd-ps"), "--config", job, "--set", dset]
    rc, out, took = timed(esd_ps)
    env.check(rc != 0 and took <= START_LIMIT_S and "DOES NOT FIT" in out and
              "MemAvailable" in out and re.search(r"needs [0-9.]+ GiB", out) and
              "job.force_plan" in out,
              "esd-ps refuses a shard that does not fit, with the plan's figures, in %.2f s: %s"
              % (took, last_error(out)))
    esdd = [os.path.join(env.bin, "esdd"), "--config", job, "--rank", "0", "--dir",
            os.path.join(env.root, "plan-node"), "--set", dset, "--set", "cache.ratio=1",
            "--set", "cache.rows=0"]
    rc, out, took = timed(esdd)
    env.check(rc != 0 and took <= START_LIMIT_S and "DOES NOT FIT" in out and
              "cache region" in out and "job.force_plan" in out,
              "esdd refuses a node whose cache does not fit, with the plan's figures, in "
              "%.2f s: %s" % (took, last_error(out)))

    # esd-launch: one host, this machine, through a plain shell
    work = os.path.join(env.root, "launch")
    os.makedirs(os.path.join(work, "ckpt"))
    os.makedirs(os.path.join(work, "run"))  # the launcher's workdir, as docs/deploy.md makes it
    port = free_port()
    s2 = dict(s, **{"ps.addrs": "127.0.0.1:%d" % port,
                    "ps.checkpoint_dir": os.path.join(work, "ckpt")})
    job2 = os.path.join(work, "job.ini")
    write_job(job2, s2)
    hosts = os.path.join(work, "hosts.ini")
    with open(hosts, "w") as f:
        f.write("[launch]\nremote = sh -c {cmd}\nbin = %s\nworkdir = %s\n"
                "torchrun = %s -m torch.distributed.run\ntrainer = {bin}/esd-trainer --quiet\n"
                "master_port = %d\n[shard0]\nhost = here\n[node0]\nhost = here\n"
                "address = 127.0.0.1\n" % (env.bin, os.path.join(work, "run"), PY,
                                           free_port()))
    launch = [PY, LAUNCH, "--job", job2, "--hosts", hosts, "--set", dset]
    rc, out, took = timed(launch, timeout=60, cwd=work)
    env.check(rc == 1 and "DOES NOT FIT" in out and "MemAvailable" in out and
              "job.force_plan" in out and "[esd-ps0]" not in out,
              "esd-launch refuses the job before starting anything, with the figures of "
              "the host (%.2f s): %s" % (took, last_error(out)))
    if subprocess.run([PY, "-c", "import torch.distributed.run"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        print("not run: the forced launch (torchrun, python3-torch, is missing)")
        return
    rc, out, took = timed(launch + ["--set", "job.force_plan=true"], timeout=240, cwd=work)
    env.check(rc == 0 and "starting anyway" in out and "every process exited 0" in out,
              "with --set job.force_plan=true the same job runs to its end (%.1f s): %s"
              % (took, [ln for ln in out.splitlines() if "anyway" in ln][:3] or
                 out.strip().splitlines()[-3:]))


def test_passes(env, base):
    """500 samples, 30 iterations of 4 x 32: 7.7 passes, batches that wrap
    mid-batch."""
    s = dict(base, **{"job.iterations": 30})
    ck, sums = env.run("passes", s)
    work = os.path.join(env.root, "passes")
    want = "the stream holds 500 samples; 30 iterations x 128 = 3840 samples: 7.7 passes, " \
           "wrapping around"
    said = {}
    for name in ["ps0"] + ["esdd%d" % w for w in range(4)]:
        with open(os.path.join(work, name + ".log")) as f:
            said[name] = want in f.read()
    env.check(all(said.values()), "esd-ps and every esdd say at start: '%s' (%s)"
              % (want, said))
    env.check(all(sm["iterations"] == 30 for sm in sums), "the job ends after 30 iterations")
    ref = env.reference("passes", s)
    r = subprocess.run([os.path.join(env.bin, "esd-ref"), "--out",
                        os.path.join(env.root, "passes-say.ckpt"), "--stream", env.stream,
                        "--iters", "30", "--batch", "128", "--dim", "8", "--hidden", "8",
                        "--opt", "adagrad"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    env.check(r.returncode == 0 and want in r.stdout,
              "esd-ref wraps around too and says so: %s" % r.stdout.strip().splitlines()[:1])
    ok, out = env.compare(ck, ref)
    env.check(ok, "7.7 passes over the stream: final tables == esd-ref's (rtol 1e-5, atol "
              "2e-6): %s" % (out.splitlines()[-1] if out else ""))


def main():
    env = Env(sys.argv[1], "start-checks")
    env.gen_stream(samples=500)
    # keyless (said so): the checks before any link are under test
    base = env.settings(job__insecure="yes")
    test_checkpoint_dirs(env, base)
    test_plan(env, base)
    test_passes(env, base)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
