"""Failures the runtime must survive or refuse:
- kill -9 of a trainer mid-iteration where something replaces it
  (job.restart_trainers): detected within 1 s, nothing blocks, the
  iteration is replayed to a new trainer, the final tables are
  bit-identical to an uninterrupted run;
- kill -9 of a trainer that nothing replaces: every process exits non-zero
  within 5 s, the daemon naming the trainer (tests/e2e/test_trainer_fail.py
  has the other ways a trainer fails);
- trainers that never attach: every daemon gives up after the barrier
  timeout naming its trainer socket, every process exits non-zero;
- a second daemon on a node directory in use is refused;
- a trainer of another uid is refused by the daemon (SO_PEERCRED);
- a node whose data.stream differs from the shard's is refused at HELLO.

usage: test_failures.py BIN_DIR
"""
import os
import re
import signal
import subprocess
import sys
import time

from e2e_util import Env, ClusterError, ctl, exit_codes, shard_files


def test_trainer_kill(env, shards, trainers=1):
    # a replacement is coming (the test starts it): the daemon waits for it
    s = env.settings(job__iterations=40, workers__trainers=trainers,
                     job__restart_trainers="true")
    tag = "%d-%d" % (shards, trainers)
    base_ck, _ = env.run("uninterrupted-" + tag, s, shards=shards)
    state = {"killed": False}

    def trainer_cmd(w, node_dir):
        argv = [os.path.join(env.bin, "esd-trainer"), "--dir", node_dir, "--quiet"]
        if w == 1 and not state["killed"]:
            state["killed"] = True
            argv += ["--die-at", "20"]
        return argv

    def during(c):
        p = c.procs["trainer1"]
        p.wait(timeout=60)  # dies by SIGKILL at iteration 20
        t_dead = time.time()
        env.check(p.returncode == -9, "trainer 1 died of SIGKILL mid-iteration")
        seen = None
        while time.time() - t_dead < 5:
            st = ctl(os.path.join(c.node_dir(1), "control.sock"), "status")
            if not st["trainer_attached"]:
                seen = time.time() - t_dead
                break
            time.sleep(0.02)
        env.check(seen is not None and seen < 1.0,
                  "daemon 1 saw the death within 1 s (%.3f s)" % (seen or -1))
        # the others are not blocked forever: their daemons answer at once
        st0 = ctl(os.path.join(c.node_dir(0), "control.sock"), "status")
        env.check(st0["iteration"] <= 20, "worker 0 waits at the barrier (iteration %d)"
                  % st0["iteration"])
        c.start_trainer(1)  # a new trainer: the iteration is replayed

    from esdcluster import Cluster
    work = os.path.join(env.root, "killed-" + tag)
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s2 = dict(s)
    s2["ps.checkpoint_dir"] = ck
    with Cluster(env.bin, work, s2, trainer_cmd=trainer_cmd, shards=shards) as c:
        c.start()
        during(c)
        c.wait(timeout=120)
        sums = c.summaries()
    env.check(sums[1]["trainer_deaths"] == 1, "daemon 1 counted one trainer death")
    ok, out = env.compare(shard_files(ck, shards), base_ck, exact=True)
    env.check(ok, "%d shard(s), %d trainer(s) per node: after the replay the final tables "
              "are bit-identical to the uninterrupted run" % (shards, trainers))


def test_trainer_gone_for_good(env):
    """A trainer killed and never replaced (no job.restart_trainers): its
    daemon fails the job at once naming it, and every process exits
    non-zero within 5 s of the kill (a failed job never ends in "training
    is over")."""
    from esdcluster import Cluster
    s = env.settings(job__iterations=100000)
    work = os.path.join(env.root, "gone")
    with Cluster(env.bin, work, s, emulate_ns=200000) as c:
        c.start()
        sock = os.path.join(work, "ps0.sock")
        t0 = time.time()
        while time.time() - t0 < 30:
            try:
                if ctl(sock, "status")["iteration"] >= 5:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        pid = c.procs["trainer1"].pid
        os.kill(pid, signal.SIGKILL)
        t_kill = time.time()
        rcs = exit_codes(c.procs)
        took = time.time() - t_kill
    print("# kill -9 of a trainer, nothing replaces it -> job over: %.2f s" % took)
    env.check(all(rc not in (0, "still running") for rc in rcs.values()) and took <= 5,
              "trainer 1 killed, none replaces it: every process exits non-zero %.2f s later "
              "(bound 5 s): %s" % (took, rcs))
    with open(os.path.join(work, "esdd1.log")) as f:
        log = f.read()
    env.check("trainer 0 (pid %d) died" % pid in log,
              "the daemon names its dead trainer: %s"
              % [ln for ln in log.splitlines() if "died" in ln][:1])
    with open(os.path.join(work, "trainer0.log")) as f:
        tlog = f.read()
    env.check("training is over" not in tlog, "no trainer says training is over")


def test_no_trainer_ever(env):
    """Trainers that exit at once without attaching (a wrong trainer
    command): no node ever reaches a barrier, so no shard times one out;
    each daemon gives up 5 x the barrier timeout + 10 s after its start
    (first trainers may import torch on a loaded host), naming its trainer
    socket, and every process exits non-zero (it used to wait for ever)."""
    from esdcluster import Cluster
    s = env.settings(job__iterations=50, ps__barrier_timeout=3)
    work = os.path.join(env.root, "no-trainer")
    with Cluster(env.bin, work, s, trainer_cmd=lambda w, node_dir: ["true"]) as c:
        t0 = time.time()
        c.start()
        rcs = exit_codes(c.procs, timeout=60)
        took = time.time() - t0
    daemons = {k: v for k, v in rcs.items() if not k.startswith("trainer")}
    env.check(all(rc not in (0, "still running") for rc in daemons.values()) and
              took < 5 * 3 + 10 + 6,
              "no trainer ever attaches: every daemon and shard exits non-zero %.1f s after "
              "the start (barrier timeout 3 s: the daemons wait 5 x 3 + 10 s for their "
              "first trainers): %s" % (took, daemons))
    # the first daemon to give up ends the job for the others (the shard
    # fails it), so look in every daemon's log
    log = ""
    for w in range(4):
        with open(os.path.join(work, "esdd%d.log" % w)) as f:
            log += f.read()
    env.check("no trainer 0 of 1 attached" in log and "esdd.sock" in log,
              "a daemon names its trainer socket: %s"
              % [ln for ln in log.splitlines() if "no trainer" in ln][:1])


def test_second_daemon_and_uid(env):
    s = env.settings(job__iterations=100000)
    from esdcluster import Cluster
    work = os.path.join(env.root, "refusals")
    with Cluster(env.bin, work, s, emulate_ns=1000000) as c:
        c.start()
        # a second daemon on node 0's directory
        r = subprocess.run([os.path.join(env.bin, "esdd"), "--config", c.job, "--rank", "0",
                            "--dir", c.node_dir(0), "--set", "ps.addrs=" + c.ps_addr[0]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        env.check(r.returncode != 0 and "in use by pid" in r.stdout,
                  "a second daemon on a node directory in use is refused: %s"
                  % r.stdout.strip().splitlines()[-1:])
    if os.geteuid() != 0:
        print("skip: the uid refusal needs root to run a daemon as another user")
        return
    # a daemon running as nobody refuses a trainer of uid 0
    work = os.path.join(env.root, "uid")
    os.makedirs(work, exist_ok=True)
    os.chmod(env.root, 0o755)
    os.chmod(work, 0o777)
    s["job.iterations"] = 3
    # nobody cannot read root's key: this job runs without one
    s.pop("job.key", None)
    s["job.insecure"] = "yes"
    s["workers.n"] = 1

    def as_nobody():
        os.setgid(65534)
        os.setuid(65534)

    ini = os.path.join(work, "job.ini")
    from esdcluster import write_ini
    write_ini(ini, s)
    ps = subprocess.Popen([os.path.join(env.bin, "esd-ps"), "--config", ini, "--listen",
                           "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True)
    addr = ps.stdout.readline().split()[-1]
    node = os.path.join(work, "node")
    d = subprocess.Popen([os.path.join(env.bin, "esdd"), "--config", ini, "--rank", "0",
                          "--dir", node, "--set", "ps.addrs=" + addr],
                         preexec_fn=as_nobody, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.time()
        while not os.path.exists(os.path.join(node, "esdd.sock")) and time.time() - t0 < 20:
            time.sleep(0.05)
        r = subprocess.run([os.path.join(env.bin, "esd-trainer"), "--dir", node],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        env.check(r.returncode != 0 and "different user" in r.stdout,
                  "a trainer of another uid is refused: %s"
                  % r.stdout.strip().splitlines()[-1:])
    finally:
        for p in (d, ps):
            p.kill()
            p.wait()


def test_corrupt_checkpoint(env):
    """esd-ps --restore refuses a truncated or corrupt checkpoint, saying so."""
    s = env.settings(job__iterations=5)
    ck, _ = env.run("ckpt-src", s)
    ckdir = os.path.dirname(ck)
    with open(ck, "rb") as f:
        data = f.read()
    from esdcluster import write_ini
    ini = os.path.join(ckdir, "job.ini")
    s["ps.checkpoint_dir"] = ckdir
    s["job.insecure"] = "yes"  # only esd-ps --restore runs
    write_ini(ini, s)
    # what a checkpoint write that died leaves: removed when a shard starts
    left = os.path.join(ckdir, ".ps-shard0.ckpt.tmp.AbC123")
    with open(left, "wb") as f:
        f.write(data[:100])
    for what, blob in (("truncated", data[:len(data) // 2]),
                       ("corrupt", data[:200] + bytes([data[200] ^ 1]) + data[201:])):
        with open(ck, "wb") as f:
            f.write(blob)
        r = subprocess.run([os.path.join(env.bin, "esd-ps"), "--config", ini, "--restore",
                            "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        last = r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else []
        env.check(r.returncode != 0 and "refusing checkpoint" in r.stdout,
                  "a %s checkpoint is refused: %s" % (what, last))
        env.check(not os.path.exists(left), "a leftover temporary checkpoint is removed")


def test_checkpoint_now(env):
    """esdctl checkpoint: the PS schedules a boundary, every node flushes its
    DIRTY rows there, the shard writes the checkpoint; training goes on."""
    from esdcluster import Cluster
    s = env.settings(job__iterations=400)
    work = os.path.join(env.root, "ckpt-now")
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s["ps.checkpoint_dir"] = ck
    with Cluster(env.bin, work, s) as c:
        c.start()
        time.sleep(0.3)
        r = subprocess.run([os.path.join(env.bin, "esdctl"), "--socket",
                            os.path.join(work, "ps0.sock"), "checkpoint", "--wait", "30"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        env.check(r.returncode == 0 and "checkpoint written" in r.stdout,
                  "esdctl checkpoint: %s" % r.stdout.strip())
        c.wait(timeout=120)
        sums = c.summaries()
    env.check(all(sm["iterations"] == 400 for sm in sums), "training goes on to the end")
    info = subprocess.run([os.path.join(env.bin, "esd-ref"), "info",
                           os.path.join(ck, "ps-shard0.ckpt")], stdout=subprocess.PIPE,
                          text=True)
    env.check(info.returncode == 0, "the final checkpoint is valid")


def test_divergence(env):
    """A node whose decision digest differs stops the job at that barrier:
    every daemon fails with the divergence, nobody trains on."""
    from esdcluster import Cluster
    s = env.settings(job__iterations=50)
    work = os.path.join(env.root, "diverge")
    c = Cluster(env.bin, work, s)
    orig = c.start_daemon

    def start_daemon(w, addrs=None):
        if w == 2:
            os.environ["ESD_TEST_DIVERGE_AT"] = "7"
        try:
            orig(w, addrs)
        finally:
            os.environ.pop("ESD_TEST_DIVERGE_AT", None)
    c.start_daemon = start_daemon
    with c:
        c.start()
        try:
            c.wait(timeout=60)
            env.check(False, "the job should have failed")
        except ClusterError:
            pass
        exit_codes(c.procs)  # wait raises at the first failure: the others write theirs
        sums = c.summaries()
    env.check(all(sm["status"] != 0 and sm["iterations"] < 7 for sm in sums),
              "every daemon stopped before training iteration 7: %s"
              % [(sm["iterations"], sm["error"]) for sm in sums])
    with open(os.path.join(work, "ps0.log")) as f:
        log = f.read()
    env.check("dispatch decisions differ" in log, "the PS names the divergence")


def test_other_stream(env):
    """A node whose data.stream differs from the shard's is refused at
    HELLO, naming the file and both digests; a byte-identical copy under
    another path is the same data and is accepted."""
    from esdcluster import write_ini
    work = os.path.join(env.root, "other-stream")
    os.makedirs(work, exist_ok=True)
    copy = os.path.join(work, "copy.esd")
    other = os.path.join(work, "other.esd")
    with open(env.stream, "rb") as f, open(copy, "wb") as g:
        g.write(f.read())
    subprocess.run([os.path.join(env.bin, "esd-data"), "gen", "-o", other, "--shape",
                    "criteo-kaggle", "-n", "8000", "--scale", "1000", "--max-rows", "2000",
                    "--seed", "8"], check=True, stdout=subprocess.DEVNULL)
    s = env.settings(workers__n=2, job__iterations=3)
    # a keyed job: its members are told why (a keyless job's shard says
    # nothing of its stream to anyone)
    from esdcluster import make_key
    s["job.key"] = make_key(os.path.join(work, "job.key"))
    ini = os.path.join(work, "job.ini")
    write_ini(ini, s)
    ps = subprocess.Popen([os.path.join(env.bin, "esd-ps"), "--config", ini, "--listen",
                           "127.0.0.1:0"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    addr = ps.stdout.readline().split()[-1]
    same = None
    try:
        same = subprocess.Popen([os.path.join(env.bin, "esdd"), "--config", ini, "--rank",
                                 "0", "--dir", os.path.join(work, "node0"), "--set",
                                 "ps.addrs=" + addr, "--set", "data.stream=" + copy],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        r = subprocess.run([os.path.join(env.bin, "esdd"), "--config", ini, "--rank", "1",
                            "--dir", os.path.join(work, "node1"), "--set",
                            "ps.addrs=" + addr, "--set", "data.stream=" + other],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=60)
        digests = re.findall(r"\b([0-9a-f]{16})\b", r.stdout)
        env.check(r.returncode != 0 and other in r.stdout and env.stream in r.stdout and
                  len(set(digests)) == 2,
                  "a node with another stream is refused naming both files and digests: %s"
                  % r.stdout.strip().splitlines()[-3:])
        env.check(same.poll() is None, "a byte-identical copy of the stream is accepted")
    finally:
        for p in (same, ps):
            if p:
                p.kill()
                p.wait()


def test_bad_settings(env):
    """esdd refuses settings it cannot run, naming them, before it connects."""
    from esdcluster import write_ini
    work = os.path.join(env.root, "bad-settings")
    os.makedirs(work, exist_ok=True)
    hot = os.path.join(work, "hot.txt")
    with open(hot, "w") as f:
        f.write("# esd hot rows v1\n" + "".join("1:%d\n" % i for i in range(500)))
    cases = [
        ("lookahead with a cache below a global batch's keys",
         {"cache.rows": 1000, "cache.policy": "lookahead"}, "cannot hold the hints"),
        ("replicated rows that leave no room for a micro-batch",
         {"cache.rows": 1000, "dispatch.replicate": hot}, "exceed the cache"),
        ("a missing hot-row file", {"dispatch.replicate": hot + ".missing"},
         "No such file"),
    ]
    empty = os.path.join(work, "empty.esd")
    tsv = os.path.join(work, "empty.tsv")
    open(tsv, "w").close()
    subprocess.run([os.path.join(env.bin, "esd-data"), "convert", "--format", "criteo-kaggle",
                    "--no-progress", "--allow-empty", "-o", empty, tsv], check=True,
                   stdout=subprocess.DEVNULL)
    cases.append(("a stream of no samples", {"data.stream": empty}, "has no samples"))
    # 200M rows: the region and the snapshots are far above this machine
    cases.append(("a cache larger than the machine's memory", {"cache.rows": 200000000},
                  "DOES NOT FIT"))
    for what, over, want in cases:
        s = env.settings(job__insecure="yes")
        s.update(over)
        ini = os.path.join(work, "job.ini")
        write_ini(ini, s)
        d = os.path.join(work, "node")
        os.makedirs(d, mode=0o700, exist_ok=True)
        r = subprocess.run([os.path.join(env.bin, "esdd"), "--config", ini, "--rank", "0",
                            "--dir", d, "--set", "ps.addrs=127.0.0.1:1"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        env.check(r.returncode != 0 and want in r.stdout, "esdd refuses %s: %s"
                  % (what, r.stdout.strip().splitlines()[-1:]))


def main():
    env = Env(sys.argv[1], "failures")
    env.gen_stream()
    try:
        test_corrupt_checkpoint(env)
        test_bad_settings(env)
        test_other_stream(env)
        test_divergence(env)
        test_checkpoint_now(env)
        test_trainer_kill(env, 1)
        test_trainer_kill(env, 2)
        test_trainer_kill(env, 1, trainers=2)
        test_trainer_gone_for_good(env)
        test_no_trainer_ever(env)
        test_second_daemon_and_uid(env)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
