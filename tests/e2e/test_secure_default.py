"""Secure by default (real esd-ps, esdd and esd-trainer processes, real
sockets on loopback):
- a shard or a daemon of a job without job.key refuses to start, naming
  job.insecure; with job.insecure = yes every process warns at start, the
  trainers included (their daemon tells them; the C trainer and the
  Python binding's);
- a stranger who computed the job token (the same job file, no key) is
  refused by a keyed job; in an insecure job, a HELLO with a wrong token or
  another stream is told "refused: not this job", no path, digest or
  setting (the shard's log keeps the details);
- a second HELLO for a worker rank already attached is refused, the
  shard's log naming its source, and the job goes on;
- a FIFO as the key path is refused within a second, naming it a FIFO; a
  0600 key owned by another uid is refused, naming the owner (as root).

usage: test_secure_default.py BIN_DIR [PYTHON_DIR]
"""
import os
import re
import struct
import subprocess
import sys
import time

from e2e_util import Env
from esdcluster import Cluster, make_key, write_ini
from test_hostile import answer, frame, hello_of_another_job, VERSION


def run(argv, timeout=30):
    """(exit status, seconds, output) of argv."""
    t0 = time.time()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, time.time() - t0, r.stdout


def esd_ps(env, ini, *extra):
    return [os.path.join(env.bin, "esd-ps"), "--config", ini, "--listen", "127.0.0.1:0"] + \
        list(extra)


def esdd(env, ini, rank, node_dir, *extra):
    os.makedirs(node_dir, mode=0o700, exist_ok=True)
    return [os.path.join(env.bin, "esdd"), "--config", ini, "--rank", str(rank), "--dir",
            node_dir] + list(extra)


def test_keyless_refused(env, work):
    """Neither a shard nor a daemon starts without a key unless the job
    says job.insecure."""
    os.makedirs(work, exist_ok=True)
    ini = os.path.join(work, "job.ini")
    write_ini(ini, env.settings(workers__n=1))
    for name, argv in (("esd-ps", esd_ps(env, ini)),
                       ("esdd", esdd(env, ini, 0, os.path.join(work, "node0"), "--set",
                                     "ps.addrs=127.0.0.1:9"))):
        rc, took, out = run(argv)
        env.check(rc != 0 and "job.insecure" in out and "job.key" in out and took < 20,
                  "%s without a key refuses to start, naming job.insecure (exit %d, %.2f s): %s"
                  % (name, rc, took, out.strip().splitlines()[-1:]))


def test_insecure_warns(env, work):
    """Every process of an insecure job warns at start, the trainer too;
    a wrong token or stream is told nothing of the job."""
    s = env.settings(job__iterations=100000, workers__n=2, **{"job.insecure": "yes"})
    with Cluster(env.bin, work, s) as c:
        c.start()
        took, text = answer(c.ps_addr[0], hello_of_another_job(env))
        env.check(took is not None and text == "refused: not this job",
                  "insecure job: a wrong token is told only 'refused: not this job': %r" % text)
        # the right token cannot be known here: another stream's HELLO
        # (main's code answered it first, with the shard's path and digest)
        other = struct.pack("<IIQIIIIQ", VERSION, 0, 0x1234, 0, 8, 8, 4, 0x5eed)
        took, text2 = answer(c.ps_addr[0], frame(1, other))
        env.check(took is not None and text2 == "refused: not this job" and
                  env.stream not in text2,
                  "insecure job: another stream's HELLO is told no path or digest: %r" % text2)
        deadline = time.time() + 30
        logs = {}
        while time.time() < deadline:
            logs = {}
            for name in ("ps0", "esdd0", "esdd1", "trainer0", "trainer1"):
                try:
                    with open(os.path.join(work, name + ".log")) as f:
                        logs[name] = f.read()
                except OSError:
                    logs[name] = ""
            if all("INSECURE" in t for t in logs.values()):
                break
            time.sleep(0.2)
    env.check(all("INSECURE" in t and "job.insecure" in t for t in logs.values()),
              "insecure job: every process warns at start, trainers included: %s"
              % sorted(n for n, t in logs.items() if "INSECURE" not in t))
    env.check("differ" in logs["ps0"] and "digest" in logs["ps0"],
              "insecure job: the shard's log keeps the refusals' details")


def test_stranger_and_second_hello(env, work):
    """A stranger with the job file and no key (so the right token) is
    refused by a keyed job; in an insecure job, a second daemon as rank 1
    is refused while rank 1 is attached, and the job goes on."""
    s = env.settings(job__iterations=100000, workers__n=2)
    with Cluster(env.bin, os.path.join(work, "keyed"), s) as c:
        c.start()
        ini = os.path.join(work, "stranger.ini")
        st = dict(c.settings)
        del st["job.key"]
        st["job.insecure"] = "yes"
        write_ini(ini, st)
        rc, took, out = run(esdd(env, ini, 1, os.path.join(work, "stranger1"), "--set",
                                 "ps.addrs=" + c.ps_addr[0]), timeout=90)
        env.check(rc != 0 and "refused" in out,
                  "keyed job: a keyless daemon with the right token is refused (exit %d): %s"
                  % (rc, [ln for ln in out.splitlines() if "refused" in ln][:1]))
        env.check(all(p.poll() is None for p in c.procs.values()),
                  "keyed job: the job goes on after the stranger")
    s = env.settings(job__iterations=100000, workers__n=2, **{"job.insecure": "yes"})
    w2 = os.path.join(work, "insecure")
    with Cluster(env.bin, w2, s) as c:
        c.start()
        deadline = time.time() + 30
        log = ""
        while time.time() < deadline and log.count("attached from") < 2:
            time.sleep(0.2)
            with open(os.path.join(w2, "ps0.log")) as f:
                log = f.read()
        rc, took, out = run(esdd(env, c.job, 1, os.path.join(work, "second1"), "--set",
                                 "ps.addrs=" + c.ps_addr[0]), timeout=90)
        time.sleep(1)
        with open(os.path.join(w2, "ps0.log")) as f:
            log = f.read()
        env.check(rc != 0 and "refused" in out,
                  "a second HELLO for attached worker 1 is refused (exit %d): %s"
                  % (rc, [ln for ln in out.splitlines() if "refused" in ln][:1]))
        env.check(re.search(r"HELLO as worker 1, which is attached already \(from 127", log),
                  "the shard logs the second HELLO naming its source: %s"
                  % [ln for ln in log.splitlines() if "attached already" in ln][:1])
        env.check(all(p.poll() is None for p in c.procs.values()),
                  "the job goes on after the second HELLO: %s"
                  % {n: p.poll() for n, p in c.procs.items()})


def test_key_files(env, work):
    """A FIFO as the key is refused at once; another user's key too."""
    os.makedirs(work, exist_ok=True)
    fifo = os.path.join(work, "key.fifo")
    os.mkfifo(fifo, 0o600)
    ini = os.path.join(work, "fifo.ini")
    write_ini(ini, env.settings(workers__n=1, job__key=fifo))
    rc, took, out = run(esd_ps(env, ini), timeout=20)
    env.check(rc != 0 and took < 1.0 and fifo in out and "FIFO" in out,
              "a FIFO as job.key is refused within a second, named (exit %d, %.2f s): %s"
              % (rc, took, out.strip().splitlines()[-1:]))
    if os.geteuid() != 0:
        print("skip: a key owned by another uid needs root to chown it")
        return
    key = make_key(os.path.join(work, "other.key"))
    os.chown(key, 65534, 65534)
    ini = os.path.join(work, "owner.ini")
    write_ini(ini, env.settings(workers__n=1, job__key=key))
    rc, took, out = run(esd_ps(env, ini), timeout=20)
    env.check(rc != 0 and "uid 65534" in out and key in out,
              "a 0600 key owned by uid 65534 is refused, naming the owner (exit %d): %s"
              % (rc, out.strip().splitlines()[-1:]))


def test_python_trainer_warns(env, work, py_dir):
    """The Python binding's trainer of an insecure job warns too."""
    os.environ["PYTHONPATH"] = py_dir
    here = os.path.dirname(os.path.abspath(__file__))
    s = env.settings(workers__n=1, job__iterations=10, ps__checkpoint_every=5,
                     **{"job.insecure": "yes"})
    work, _ = env.run_dirs(s, work)
    with Cluster(env.bin, work, s, trainer_cmd=lambda w, d: [
            "/usr/bin/python3", os.path.join(here, "py_trainer.py"), d, "5"]) as c:
        c.start()
        c.wait(timeout=120)
    with open(os.path.join(work, "trainer0.log")) as f:
        log = f.read()
    env.check("INSECURE" in log and "job.insecure" in log,
              "insecure job: the Python trainer warns: %s"
              % [ln for ln in log.splitlines() if "INSECURE" in ln][:1])


def main():
    env = Env(sys.argv[1], "secure")
    env.gen_stream(samples=2000)
    if len(sys.argv) > 2 and os.path.exists(os.path.join(sys.argv[2], "esd")):
        test_python_trainer_warns(env, "python", sys.argv[2])
    else:
        print("skip: no Python binding given (the build's python directory)")
    test_keyless_refused(env, os.path.join(env.root, "keyless"))
    test_key_files(env, os.path.join(env.root, "keys"))
    test_insecure_warns(env, os.path.join(env.root, "warns"))
    test_stranger_and_second_hello(env, os.path.join(env.root, "stranger"))
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
