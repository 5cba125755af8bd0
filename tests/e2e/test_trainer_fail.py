"""A trainer that fails, dies or stops ends the job in seconds, saying why
(no job.restart_trainers: nothing replaces it):
- a PyTorch trainer (esd.torch) raises in iteration 5: its daemon gets
  FAILED with the exception's text, every process exits non-zero within
  5 s of the raise, the text in the daemon's and the shard's failure;
- a C trainer that calls esd_trainer_fail, and one that aborts (libesd's
  SIGABRT handler): the same, with their text;
- kill -9 of a C trainer: every process non-zero within 5 s of the kill;
- SIGSTOP of a C trainer: its daemon finds it silent within
  job.peer_timeout_ms (3 s), the job fails naming it within 5 s;
- SIGSTOP of a daemon: its trainer gives up within 5 s naming the socket;
- the heartbeats' cost on the attach socket, counted with strace where
  there is one.
Each case prints its measured time ("# ... : 1.23 s").

The bound, 5 s: job.peer_timeout_ms (3 s) for a silent peer, then a
poll pass (200 ms) and exits that each take milliseconds of CPU; for a
raise, a FAILED message and exits alone. No path waits for long CPU
work: a failed esd.torch trainer exits without the interpreter's
teardown, which its gloo peer would otherwise wait for before starting
its own: two such teardowns in a row outlast the bound on a loaded host.

usage: test_trainer_fail.py BIN_DIR PYTHON_DIR     exit 0 pass, 1 fail
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from e2e_util import Env, ClusterError

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND_S = 5.0


def exit_times(procs, timeout=30):
    """{name: (exit code or "still running", time.time() of its exit)}."""
    out, end = {}, time.time() + timeout
    while len(out) < len(procs) and time.time() < end:
        for name, p in procs.items():
            if name not in out and p.poll() is not None:
                out[name] = (p.returncode, time.time())
        time.sleep(0.01)
    for name in procs:
        out.setdefault(name, ("still running", time.time()))
    return out


def log_of(work, name):
    with open(os.path.join(work, name + ".log"), errors="replace") as f:
        return f.read()


def failure_lines(text, word="job failed"):
    return [ln for ln in text.splitlines() if word in ln]


def wait_iteration(c, it, limit_s=120):
    """Until shard 0 reports iteration it (the job runs)."""
    from e2e_util import ctl
    sock = os.path.join(c.work, "ps0.sock")
    t0 = time.time()
    while time.time() - t0 < limit_s:
        try:
            if ctl(sock, "status")["iteration"] >= it:
                return
        except (OSError, ValueError, KeyError):
            pass
        for name, p in c.procs.items():
            if p.poll() is not None:
                raise ClusterError("%s exited with %s before iteration %d: see %s/%s.log"
                                   % (name, p.returncode, it, c.work, name))
        time.sleep(0.01)
    raise ClusterError("the job did not reach iteration %d in %d s" % (it, limit_s))


def check_all_failed(env, what, times, t_event):
    rcs = {k: v[0] for k, v in times.items()}
    took = max(v[1] for v in times.values()) - t_event
    print("# %s -> job over: %.2f s" % (what, took), flush=True)
    env.check(all(rc not in (0, "still running") for rc in rcs.values()),
              "%s: every process exits non-zero: %s" % (what, rcs))
    each = ", ".join("%s %.2f s" % (k, v[1] - t_event)
                     for k, v in sorted(times.items(), key=lambda kv: kv[1][1]))
    env.check(took <= BOUND_S, "%s: the job is over %.2f s after it (bound %.0f s; exits: %s)"
              % (what, took, BOUND_S, each))
    return took


def check_reason(env, what, work, want, names=("esdd0", "ps0")):
    for name in names:
        lines = failure_lines(log_of(work, name))
        env.check(any(want in ln for ln in lines), "%s: %s's failure says %r: %s"
                  % (what, name, want, lines[:2]))


def test_pytorch_raise(env, python_dir):
    """(i) the user's PyTorch script raises in iteration 5."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = os.path.join(env.root, "torch-raise")
    stamp = os.path.join(work, "raised")
    settings = env.settings(workers__n=2, job__iterations=2000, workers__batch=64)

    def cmd(w, node_dir):
        return ["env", "ESD_NODE_DIR=" + node_dir, "RANK=%d" % w, "WORLD_SIZE=2",
                "GROUP_RANK=%d" % w, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=%d" % port,
                "PYTHONPATH=" + python_dir, "ESD_TEST_RAISE_RANK=0", "ESD_TEST_RAISE_AT=5",
                "ESD_TEST_RAISE_STAMP=" + stamp, "/usr/bin/python3",
                os.path.join(HERE, "py_fail_trainer.py")]

    from esdcluster import Cluster
    with Cluster(env.bin, work, settings, trainer_cmd=cmd) as c:
        c.start()
        times = exit_times(c.procs, timeout=240)
    if not os.path.exists(stamp):
        env.check(False, "PyTorch trainer: it reached iteration 5 (see %s/trainer0.log: %s)"
                  % (work, log_of(work, "trainer0").strip().splitlines()[-3:]))
        return
    with open(stamp) as f:
        t_raise = float(f.read())
    check_all_failed(env, "trainer raise", times, t_raise)
    check_reason(env, "PyTorch trainer", work, "ValueError: deliberate bug at iteration 5")
    check_reason(env, "PyTorch trainer", work, "py_fail_trainer.py:", names=("esdd0",))
    env.check("Traceback" in log_of(work, "trainer0"),
              "PyTorch trainer: its own log keeps the traceback")


def c_trainer_case(env, name, extra, want, settings=None):
    """A C trainer of node 1 run with extra options fails at iteration 10."""
    work = os.path.join(env.root, name)
    s = settings or env.settings(workers__n=2, job__iterations=100000)

    def cmd(w, node_dir):
        argv = [os.path.join(env.bin, "esd-trainer"), "--dir", node_dir, "--quiet",
                "--emulate", "100000"]
        return argv + (extra if w == 1 else [])

    from esdcluster import Cluster
    with Cluster(env.bin, work, s, trainer_cmd=cmd) as c:
        c.start()
        p = c.procs["trainer1"]
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            env.check(False, "%s: trainer 1 ended" % name)
            return
        t_event = time.time()
        times = exit_times(c.procs)
    check_all_failed(env, name, times, t_event)
    check_reason(env, name, work, want, names=("esdd1", "ps0"))


def test_kill(env):
    """(ii) kill -9 of a C trainer, nothing restarts it."""
    from esdcluster import Cluster
    work = os.path.join(env.root, "kill")
    s = env.settings(workers__n=2, job__iterations=100000)
    with Cluster(env.bin, work, s, emulate_ns=100000) as c:
        c.start()
        wait_iteration(c, 5)
        pid = c.procs["trainer1"].pid
        os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        times = exit_times(c.procs)
    check_all_failed(env, "kill -9 of a trainer", times, t_kill)
    check_reason(env, "kill -9", work, "trainer 0 (pid %d) died" % pid,
                 names=("esdd1", "ps0"))


def test_sigstop(env):
    """(iii) SIGSTOP of a C trainer: silent, so dead."""
    from esdcluster import Cluster
    work = os.path.join(env.root, "sigstop")
    s = env.settings(workers__n=2, job__iterations=100000)
    with Cluster(env.bin, work, s, emulate_ns=100000) as c:
        c.start()
        wait_iteration(c, 5)
        p = c.procs["trainer1"]
        os.kill(p.pid, signal.SIGSTOP)
        t_stop = time.time()
        others = {k: v for k, v in c.procs.items() if k != "trainer1"}
        times = exit_times(others)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    check_all_failed(env, "SIGSTOP of a trainer", times, t_stop)
    check_reason(env, "SIGSTOP", work, "trainer 0 (pid %d) died: silent for" % p.pid,
                 names=("esdd1", "ps0"))


def test_daemon_stopped(env):
    """SIGSTOP of a daemon: its trainer hears nothing, not even a
    heartbeat, for job.peer_timeout_ms and fails naming the socket."""
    from esdcluster import Cluster
    work = os.path.join(env.root, "daemon-stop")
    s = env.settings(workers__n=2, job__iterations=100000)
    with Cluster(env.bin, work, s, emulate_ns=100000) as c:
        c.start()
        wait_iteration(c, 5)
        d, t = c.procs["esdd1"], c.procs["trainer1"]
        os.kill(d.pid, signal.SIGSTOP)
        t_stop = time.time()
        try:
            t.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        took = time.time() - t_stop
        os.kill(d.pid, signal.SIGKILL)
    print("# SIGSTOP of a daemon -> its trainer gives up: %.2f s" % took, flush=True)
    env.check(t.returncode not in (0, None) and took <= BOUND_S,
              "a stopped daemon's trainer exits non-zero %.2f s later (bound %.0f s): %s"
              % (took, BOUND_S, t.returncode))
    sock = os.path.join(c.node_dir(1), "esdd.sock")
    lines = [ln for ln in log_of(work, "trainer1").splitlines() if "not even a heartbeat" in ln]
    env.check(any(sock in ln for ln in lines), "the trainer names the daemon's socket: %s"
              % lines[:1])


def heartbeat_cost(env):
    """Bytes per second the heartbeats put on an attach socket: a trainer
    whose steps take 2 s each (it sends only heartbeats meanwhile, the
    daemon only heartbeats), traced for 6 s."""
    if not shutil.which("strace"):
        print("# heartbeat cost: not measured (no strace)")
        return
    from esdcluster import Cluster
    work = os.path.join(env.root, "hb-cost")
    s = env.settings(workers__n=1, job__iterations=4, workers__batch=32)
    with Cluster(env.bin, work, s, emulate_ns=2 * 10 ** 9 // 32) as c:
        c.start()
        wait_iteration(c, 1)
        r = subprocess.run(["timeout", "6", "strace", "-f", "-e", "trace=sendmsg,sendto",
                            "-p", str(c.procs["trainer0"].pid)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        c.wait(timeout=60)
    sizes = [int(m) for m in re.findall(r"(?:sendmsg|sendto)\(.*\) = (\d+)", r.stderr)]
    if not sizes:
        print("# heartbeat cost: not measured (strace saw nothing: %s)"
              % r.stderr.strip().splitlines()[:2])
        return
    print("# heartbeat cost, trainer -> daemon: %d messages, %d bytes in 6 s: %.0f bytes/s "
          "(job.heartbeat_ms 500)" % (len(sizes), sum(sizes), sum(sizes) / 6.0), flush=True)
    env.check(sum(sizes) / 6.0 < 1000, "heartbeats cost under 1 kB/s on the attach socket")


def main():
    env = Env(sys.argv[1], "trainer-fail")
    python_dir = sys.argv[2]
    env.gen_stream()
    try:
        test_kill(env)
        test_sigstop(env)
        test_daemon_stopped(env)
        c_trainer_case(env, "esd_trainer_fail", ["--fail-at", "10"],
                       "failed: --fail-at 10: failing as asked")
        c_trainer_case(env, "abort", ["--abort-at", "10"],
                       "failed: killed by signal SIGABRT")
        heartbeat_cost(env)
        if os.environ.get("ESD_PYTORCH_SKIP"):
            print("skip: PyTorch trainer case: %s" % os.environ["ESD_PYTORCH_SKIP"])
        elif subprocess.run(["/usr/bin/python3", "-c", "import torch"],
                            capture_output=True).returncode != 0:
            print("skip: PyTorch trainer case: /usr/bin/python3 has no torch")
        else:
            test_pytorch_raise(env, python_dir)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
