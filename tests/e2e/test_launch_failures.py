"""tools/launch/esd-launch when something fails: it says what failed,
where, with the failing process's own words, and never waits without a
bound. Every host is this machine (`remote = sh -c {cmd}`): one shard, two
nodes, one PyTorch trainer each (tests/e2e/py_fail_trainer.py, esd.torch
under torchrun, gloo on lo):
- --check prints the restart settings it passes to every process
  (job.restart_shards, job.restart_trainers, torchrun's --max_restarts
  and rendezvous timeout);
- the trainer of node 1 raises at iteration 5: the launcher exits 1, its
  diagnosis names trainers1 (node 1), shows the exception's text and the
  log's path, every process exits non-zero, and the job is over within
  5 s of the raise;
- node 1's trainers get GLOO_SOCKET_IFNAME=nonexistent0 (their gloo
  rendezvous fails): the launcher names node 1 with gloo's error and every
  process is stopped within the rendezvous timeout (40 s here: torch's
  start on a loaded machine comes first) plus a margin;
- node 1's trainer never attaches (its rendezvous hangs): at the
  rendezvous timeout (20 s here) the launcher names node 1 with its
  trainer's last lines and stops every process;
- esdcluster (the tests' Cluster) the same way: a C trainer killed
  mid-run, its wait() raises naming trainer1, its log and last lines.
Measured times are printed as "# EVENT -> launcher exit: S s".

Needs /usr/bin/python3 with torch (torchrun): exits 77 otherwise.

usage: test_launch_failures.py BIN_DIR
"""
import os
import re
import socket
import subprocess
import sys
import time

from e2e_util import Cluster, ClusterError, Env, ctl

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "launch", "esd-launch"))
TRAINER = os.path.join(HERE, "py_fail_trainer.py")
PY = "/usr/bin/python3"
RDZV = 20  # the rendezvous timeout of the hang, s
# the bad interface's: gloo fails once torch is loaded, which may take a
# loaded machine most of 20 s; the launcher must act on that failure
RDZV_IFACE = 40
MARGIN = 15  # s past it for a loaded 2-core machine (torch's start, the stop)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_files(env, name, node_env=None, launch=None, ckpt=True):
    """A job of one shard and two nodes, one trainer each, and its hosts
    file with every host this machine; (dir, job, hosts)."""
    d = os.path.join(env.root, name)
    os.makedirs(os.path.join(d, "run"), exist_ok=True)
    os.makedirs(os.path.join(d, "ckpt"), exist_ok=True)
    job = os.path.join(d, "job.ini")
    key = os.path.join(d, "job.key")
    subprocess.run([os.path.join(env.bin, "esdctl"), "keygen", key], check=True,
                   stdout=subprocess.DEVNULL)
    with open(job, "w") as f:
        f.write("[job]\nseed = 11\niterations = 100000\nkey = %s\n" % key)
        f.write("[workers]\nn = 2\nbatch = 32\ntrainers = 1\n")
        f.write("[model]\ndim = 8\nhidden = 8\noptimizer = adagrad\nlr = 0.05\n")
        f.write("[cache]\nratio = 0.08\n[data]\nstream = %s\n" % env.stream)
        f.write("[ps]\nshards = 1\naddrs = 127.0.0.1:%d\n" % free_port())
        if ckpt:
            f.write("checkpoint_dir = %s\n" % os.path.join(d, "ckpt"))
    hosts = os.path.join(d, "hosts.ini")
    la = {"remote": "sh -c {cmd}", "bin": env.bin, "workdir": os.path.join(d, "run"),
          "torchrun": PY + " -m torch.distributed.run", "trainer": PY + " " + TRAINER,
          "master_port": free_port(), "logdir": os.path.join(d, "logs"), "stop_grace": 3}
    la.update(launch or {})
    with open(hosts, "w") as f:
        f.write("[launch]\n" + "".join("%s = %s\n" % kv for kv in la.items()))
        f.write("[shard0]\nhost = here-ps\n")
        for w in range(2):
            f.write("[node%d]\nhost = here-%d\naddress = 127.0.0.1\n" % (w, w))
            f.write("env = GLOO_SOCKET_IFNAME=lo %s\n" % (node_env or {}).get(w, ""))
    return d, job, hosts


def launch(job, hosts, *extra, timeout=180):
    """Run the launcher to its end: (status, output, seconds, time it
    exited)."""
    t0 = time.monotonic()
    p = subprocess.Popen([PY, LAUNCH, "--job", job, "--hosts", hosts] + list(extra),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(2)
        p.send_signal(2)
        out, _ = p.communicate(timeout=60)
    t1 = time.monotonic()
    with open(os.path.join(os.path.dirname(job), "launch%s.log" % "".join(extra)), "w") as f:
        f.write(out)
    return p.returncode, out, t1 - t0, t1


def leftovers(d):
    """Processes still running that belong to the job in d (their command
    line or environment names it)."""
    out = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % e, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/environ" % e, "rb") as f:
                envb = f.read()
        except OSError:
            continue
        if d.encode() in cmd or d.encode() in envb:
            out.append("%s %s" % (e, cmd.replace(b"\0", b" ").decode(errors="replace")[:120]))
    return out


def all_stopped(env, d, what):
    """Every process of the job in d is gone (within 2 s of the launcher's
    exit)."""
    end = time.monotonic() + 2
    left = leftovers(d)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = leftovers(d)
    env.check(not left, "%s: no process of the job left running: %s" % (what, left))


def diagnosis(out):
    """The launcher's lines from its first 'failed:' on."""
    lines = out.splitlines()
    i = next((k for k, ln in enumerate(lines) if ln.startswith("[esd-launch] failed:")),
             len(lines))
    return lines[i:]


def statuses_nonzero(out):
    m = re.search(r"\[esd-launch\] exit statuses: (.*)", out)
    if not m:
        return False, "no exit statuses line"
    st = dict(x.rsplit(" ", 1) for x in m.group(1).split(", "))
    return all(v not in ("0", "running") for v in st.values()), st


def test_check(env):
    d, job, hosts = write_files(env, "check")
    rc, out, _, _ = launch(job, hosts, "--check")
    cmds = [ln for ln in out.splitlines() if re.match(r"here-", ln)]
    env.check(rc == 0 and len(cmds) == 5 and
              all("--set job.restart_shards=true --set job.restart_trainers=false" in ln
                  for ln in cmds if "esd-ps" in ln or "esdd" in ln),
              "--check: every shard and daemon gets job.restart_shards=true (esd-launch "
              "restarts shards, checkpoint_dir set) and job.restart_trainers=false")
    env.check("restarts: a dead shard: esd-launch starts it again" in out and
              "restarts: a dead trainer: nobody restarts it" in out and
              all("--max_restarts 0" in ln and "--rdzv_conf timeout=120" in ln
                  for ln in cmds if "torch.distributed.run" in ln),
              "--check says who restarts what, and torchrun gets --max_restarts 0 and the "
              "rendezvous timeout (120 s by default): %s"
              % [ln for ln in out.splitlines() if ln.startswith(("restarts", "rendezvous"))])
    d, job, hosts = write_files(env, "check2", launch={"max_restarts": 2,
                                                       "rendezvous_timeout": 30}, ckpt=False)
    rc, out, _, _ = launch(job, hosts, "--check")
    env.check(rc == 0 and "--set job.restart_shards=false --set job.restart_trainers=true"
              in out and "--max_restarts 2" in out and "--rdzv_conf timeout=30" in out and
              "no ps.checkpoint_dir" in out,
              "--check with max_restarts = 2 and no checkpoint_dir: restart_trainers=true, "
              "restart_shards=false, torchrun --max_restarts 2 --rdzv_conf timeout=30")
    d, job, hosts = write_files(env, "check3", launch={"max_restart": 2})
    rc, out, _, _ = launch(job, hosts, "--check")
    env.check(rc == 2 and "max_restart: unknown" in out,
              "a misspelt [launch] key is refused, naming it: %s" % out.strip()[-120:])


def test_trainer_raises(env):
    d, job, hosts = write_files(env, "raise", node_env={1: "ESD_TEST_RAISE_RANK=1"})
    rc, out, took, t_exit = launch(job, hosts)
    m = re.search(r"ESD_TEST_RAISED (\d+\.\d+)", out)
    diag = "\n".join(diagnosis(out))
    log = os.path.join(d, "logs", "trainers1.log")
    env.check(rc == 1 and "failed: trainers1" in diag and "node 1" in diag,
              "a PyTorch trainer that raises: the launcher exits 1 naming trainers1 (node 1): %s"
              % diagnosis(out)[:1])
    env.check("ValueError: deliberate bug at iteration 5 of trainer rank 1" in diag and
              log in diag and "Traceback (most recent call last)" in diag,
              "its diagnosis shows the trainer's traceback and its log %s" % log)
    with open(log) as f:
        env.check("deliberate bug at iteration 5" in f.read(), "the log holds the traceback")
    ok, st = statuses_nonzero(out)
    env.check(ok, "every process exited non-zero: %s" % st)
    all_stopped(env, d, "trainer raised")
    if m:
        dt = t_exit - float(m.group(1))
        print("# PyTorch trainer raises -> launcher exit: %.1f s" % dt)
        env.check(dt <= 5.0, "the job is over %.1f s after the raise (<= 5 s)" % dt)
    else:
        env.check(False, "the trainer printed its raise: %s" % out[-2000:])


def test_bad_interface(env):
    d, job, hosts = write_files(env, "iface", node_env={1: "GLOO_SOCKET_IFNAME=nonexistent0"},
                                launch={"rendezvous_timeout": RDZV_IFACE})
    rc, out, took, _ = launch(job, hosts)
    diag = "\n".join(diagnosis(out))
    print("# rendezvous failure (GLOO_SOCKET_IFNAME=nonexistent0) -> launcher exit: %.1f s"
          % took)
    env.check(rc == 1 and re.search(r"failed: (trainers1 on here-1|node 1 on here-1)", diag),
              "node 1's trainers on an interface that does not exist: the launcher names "
              "node 1: %s" % diagnosis(out)[:1])
    env.check("nonexistent0" in diag, "with the trainer's own words (gloo's error)")
    env.check(took <= RDZV_IFACE + MARGIN, "the job is stopped %.1f s after the launch "
              "(rendezvous timeout %d s + %d s)" % (took, RDZV_IFACE, MARGIN))
    all_stopped(env, d, "rendezvous failure")


def test_rendezvous_hangs(env):
    d, job, hosts = write_files(env, "hang", node_env={1: "ESD_TEST_HANG=1"},
                                launch={"rendezvous_timeout": RDZV})
    rc, out, took, _ = launch(job, hosts)
    diag = "\n".join(diagnosis(out))
    print("# rendezvous hangs (node 1's trainer never attaches) -> launcher exit: %.1f s"
          % took)
    env.check(rc == 1 and "failed: node 1 on here-1: 0 of 1 trainer(s) attached" in diag and
              "rendezvous timeout of %d s" % RDZV in diag,
              "a node whose trainers never attach: the launcher names it at the rendezvous "
              "timeout: %s" % [ln for ln in diagnosis(out) if "failed:" in ln])
    env.check("ESD_TEST_HANG: not joining the job" in diag,
              "with its trainers' last lines")
    env.check(RDZV - 1 <= took <= RDZV + MARGIN,
              "the job is stopped %.1f s after the launch (rendezvous timeout %d s + %d s)"
              % (took, RDZV, MARGIN))
    all_stopped(env, d, "rendezvous hang")


def test_cluster_names_trainer(env):
    s = env.settings(job__iterations=100000, workers__n=2)
    work = os.path.join(env.root, "cluster")
    err, took = None, None
    with Cluster(env.bin, work, s, emulate_ns=200000) as c:
        c.start()
        end = time.monotonic() + 60
        it = 0
        while it < 5 and time.monotonic() < end:
            try:
                it = ctl(os.path.join(c.node_dir(1), "control.sock"), "status")["iteration"]
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        t0 = time.monotonic()
        c.kill("trainer1")
        try:
            c.wait(timeout=60)
        except ClusterError as e:
            err, took = str(e), time.monotonic() - t0
    log = os.path.join(work, "trainer1.log")
    env.check(err is not None and "started with trainer1" in err and log in err and
              "attached" in err,
              "esdcluster: a trainer killed at iteration %d: wait() names trainer1, its log "
              "and its last lines: %s" % (it, (err or "no error").splitlines()[:1]))
    if took is not None:
        print("# C trainer killed (esdcluster) -> ClusterError: %.1f s" % took)


def main():
    if subprocess.run([PY, "-c", "import torch.distributed.run"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        print("skip: torchrun (python3-torch) is missing")
        return 77
    if os.environ.get("ESD_PYTORCH_SKIP"):
        print("skip: %s" % os.environ["ESD_PYTORCH_SKIP"])
        return 77
    env = Env(sys.argv[1], "launchfail")
    env.gen_stream()
    test_check(env)
    test_cluster_names_trainer(env)
    test_trainer_raises(env)
    test_bad_interface(env)
    test_rendezvous_hangs(env)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
