"""A job that stops and resumes:
- SIGTERM to any process of a running job (a node daemon, a trainer, the PS
  shard) or `esdctl stop` is a graceful stop of the whole job: a few
  iterations later, at a checkpoint boundary, every process exits 0;
- the same job started again resumes from that checkpoint (tables,
  optimizer state, data cursor, every node's dispatcher state and sizes),
  and a run stopped four times ends bit-identical to one never stopped,
  with one shard and with two (a stop asked at shard 1 relayed to shard 0),
  and with per-table dims (model.dims: version-2 checkpoints);
- after kill -9 of every process, the same start resumes from the last
  complete checkpoint, again bit-identical, also when the shards were
  killed between writing one checkpoint (shard 1 has it, shard 0 not);
- kill -9 of one node daemon: shard 0 fails the job naming it within 1 s,
  every process exits non-zero, and the same start resumes;
- a node whose state file of the boundary is corrupt is refused, naming it.

usage: test_stop_resume.py BIN_DIR
"""
import glob
import os
import signal
import subprocess
import sys
import time

from e2e_util import Env, ClusterError, ctl, shard_files
from esdcluster import Cluster

ITERS = 150


def wait_iteration(sock, it, limit_s=60):
    """Poll a control socket until its iteration reaches it; the iteration."""
    got, t0 = 0, time.time()
    while got < it and time.time() - t0 < limit_s:
        try:
            got = ctl(sock, "status")["iteration"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.003)
    return got


def wait_all(c, timeout):
    """Every process's exit status ("still running" after timeout s)."""
    rcs = {}
    for name, p in c.procs.items():
        try:
            rcs[name] = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rcs[name] = "still running"
    return rcs


def stop_run(env, c, work, victim, at):
    """Stop the running job c once shard 0 passed iteration at, by SIGTERM to
    process victim (or esdctl stop on shard 0): every process exits 0, every
    node at the same boundary. Returns that boundary."""
    sock = os.path.join(work, "ps0.sock")
    got = wait_iteration(sock, at)
    t0 = time.time()
    if victim == "esdctl":
        r = subprocess.run([os.path.join(env.bin, "esdctl"), "--socket", sock, "stop"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=30)
        env.check(r.returncode == 0, "esdctl stop: %s" % r.stdout.strip())
    else:
        os.kill(c.procs[victim].pid, signal.SIGTERM)
    rcs = wait_all(c, 60)
    took = time.time() - t0
    env.check(all(rc == 0 for rc in rcs.values()),
              "stop by %s at iteration %d: every process exits 0 within %.2f s: %s"
              % (victim, got, took, rcs))
    sums = c.summaries()
    stops = sorted({sm["stopped_at"] for sm in sums})
    env.check(len(stops) == 1 and got < stops[0] < ITERS and
              all(sm["iterations"] == stops[0] for sm in sums),
              "every node stopped after the same iteration %s (asked at %d)" % (stops, got))
    return stops[0]


def check_ckpt_at(env, ck, it):
    info = subprocess.run([os.path.join(env.bin, "esd-ref"), "info",
                           os.path.join(ck, "ps-shard0.ckpt")], stdout=subprocess.PIPE,
                          text=True)
    env.check(info.returncode == 0 and ("iteration %d" % it) in info.stdout,
              "the shard's checkpoint is at iteration %d: %s"
              % (it, info.stdout.strip().splitlines()[:2]))


def test_stops(env, s, base, shards, victims, tag=""):
    """Graceful stops by SIGTERM to each victim in turn (esdctl: esdctl stop
    on shard 0), each followed by the same start, the last to the end."""
    work = os.path.join(env.root, "%sstops-%d" % (tag, shards))
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s = dict(s)
    s["ps.checkpoint_dir"] = ck
    at = 10
    for victim in victims + (None,):
        with Cluster(env.bin, work, s, shards=shards) as c:
            c.start(resume=True)
            if victim:
                stop = stop_run(env, c, work, victim, at)
                check_ckpt_at(env, ck, stop)
                at = stop + 15
            else:
                c.wait(timeout=120)
                sums = c.summaries()
                env.check(all(sm["iterations"] == ITERS and sm["stopped_at"] == 0
                              for sm in sums), "the last start trains to the end")
    with open(os.path.join(work, "esdd0.log")) as f:
        log = f.read()
    env.check("the job resumes after iteration" in log, "the last start resumed: %s"
              % [ln for ln in log.splitlines() if "resumes" in ln][:1])
    ok, out = env.compare(shard_files(ck, shards), base, exact=True)
    env.check(ok, "%s%d shard(s), stopped %d times: the final tables are bit-identical to "
              "the uninterrupted run: %s" % (tag, shards, len(victims), out.splitlines()[-1:]))


def test_kill_all(env, s, base, shards, mixed=False):
    """kill -9 of every process mid-run, then the same start: it resumes
    from the last complete checkpoint (every 20 iterations). mixed: as if
    shard 0 died before writing its newest checkpoint and shard 1 after
    (shard 0's previous one put in its place): the shards resume from
    different checkpoints and every node takes them back to the one all
    have."""
    work = os.path.join(env.root, "killall-mixed" if mixed else "killall")
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s = dict(s)
    s["ps.checkpoint_dir"] = ck
    s["ps.checkpoint_every"] = 20
    with Cluster(env.bin, work, s, shards=shards) as c:
        c.start()
        got = wait_iteration(os.path.join(work, "ps0.sock"), 50)
        for p in c.procs.values():
            p.send_signal(signal.SIGKILL)
        for p in c.procs.values():
            p.wait()
    env.check(got >= 50, "every process killed at iteration %d" % got)
    if mixed:
        os.replace(os.path.join(ck, "ps-shard0.prev.ckpt"), os.path.join(ck, "ps-shard0.ckpt"))
    with Cluster(env.bin, work, s, shards=shards) as c:
        c.start(resume=True)
        c.wait(timeout=120)
        sums = c.summaries()
    with open(os.path.join(work, "esdd0.log")) as f:
        log = f.read().splitlines()
    resumed = [ln for ln in log if "resumes after" in ln]
    env.check(len(resumed) == 1 and all(sm["iterations"] == ITERS for sm in sums),
              "the same start resumes and trains to the end: %s" % resumed)
    if mixed:  # the first node to see both takes shard 1 back; the others see 20 twice
        back = []
        for lf in glob.glob(os.path.join(work, "esdd*.log")):
            with open(lf) as f:
                back += [ln for ln in f if "resumed from different checkpoints" in ln]
        env.check(len(back) >= 1,
                  "the nodes took the shards back to their common checkpoint: %s, %s"
                  % (back[:1], resumed))
    ok, out = env.compare(shard_files(ck, shards), base, exact=True)
    env.check(ok, "after kill -9 of everything the final tables are bit-identical: %s"
              % out.splitlines()[-1:])


def test_node_killed(env, s, base):
    """kill -9 of a node daemon mid-run: shard 0 fails the job naming the
    worker within 1 s, every other process exits non-zero within seconds
    (none waits forever), and the same start resumes from the last
    complete checkpoint, bit-identical."""
    work = os.path.join(env.root, "node-killed")
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s = dict(s)
    s["ps.checkpoint_dir"] = ck
    s["ps.checkpoint_every"] = 20
    sock = os.path.join(work, "ps0.sock")
    with Cluster(env.bin, work, s) as c:
        c.start()
        got = wait_iteration(sock, 30)
        os.kill(c.procs["esdd2"].pid, signal.SIGKILL)
        t0 = time.time()
        seen = None
        while time.time() - t0 < 5 and seen is None:
            try:
                if ctl(sock, "status").get("failed"):
                    seen = time.time() - t0
            except (OSError, ValueError):
                pass
            time.sleep(0.002)
        rcs = wait_all(c, 30)
        took = time.time() - t0
    env.check(seen is not None and seen < 1.0,
              "esdd2 killed at iteration %d: shard 0 failed the job within 1 s (%.3f s)"
              % (got, seen if seen is not None else -1))
    env.check(all(rc not in (0, "still running") for rc in rcs.values()),
              "every other process exits non-zero within %.1f s: %s" % (took, rcs))
    with open(os.path.join(work, "esdd0.log")) as f:
        log = f.read()
    env.check("worker 2 went away" in log, "the other nodes name the worker that went "
              "away: %s" % [ln for ln in log.splitlines() if "went away" in ln][:1])
    with Cluster(env.bin, work, s) as c:
        c.start(resume=True)
        c.wait(timeout=120)
    ok, out = env.compare(os.path.join(ck, "ps-shard0.ckpt"), base, exact=True)
    env.check(ok, "started again, the job resumes and ends bit-identical: %s"
              % out.splitlines()[-1:])


def test_corrupt_state(env, s):
    """A node's state file of the boundary is corrupt: that daemon refuses
    to resume, naming the file and what is wrong. Node 0 decides for every
    node (docs/design.md §5, One decider): the dispatcher's state is its."""
    work = os.path.join(env.root, "corrupt")
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s = dict(s)
    s["ps.checkpoint_dir"] = ck
    with Cluster(env.bin, work, s) as c:
        c.start()
        stop = stop_run(env, c, work, "esdd0", 10)
    path = os.path.join(work, "node0", "node0-%d.state" % stop)
    env.check(os.path.exists(path), "node 0 wrote its state of iteration %d" % stop)
    with open(path, "r+b") as f:
        f.seek(300)
        b = f.read(1)
        f.seek(300)
        f.write(bytes([b[0] ^ 0x40]))
    with Cluster(env.bin, work, s) as c:
        try:
            c.start(resume=True)
            c.wait(timeout=60)
            env.check(False, "the job should not resume with a corrupt state file")
        except ClusterError:
            pass
    with open(os.path.join(work, "esdd0.log")) as f:
        log = f.read()
    env.check("refusing the node's part of checkpoint" in log and path in log and "checksum" in log,
              "esdd0 refuses the corrupt state file, naming it: %s"
              % [ln for ln in log.splitlines() if "refusing" in ln][:1])
    env.check(len(glob.glob(os.path.join(work, "node0", "node0-*.state"))) >= 1,
              "the state files are kept for another try")


def main():
    env = Env(sys.argv[1], "stop-resume")
    env.gen_stream(samples=20000)
    s = env.settings(job__iterations=ITERS)
    try:
        base, _ = env.run("uninterrupted", s)
        test_stops(env, s, base, 1, ("esdd2", "trainer1", "esdctl", "ps0"))
        # two shards: a stop asked at shard 1 is relayed to shard 0
        base2, _ = env.run("uninterrupted-2", s, shards=2)
        test_stops(env, s, base2, 2, ("ps1", "esdd0"))
        # per-table dims: the shards stop and resume from version-2
        # checkpoints (each row at its table's dim)
        sd = dict(s, **{"model.dim": 16, "model.dims": "4,8*12,16*12,4"})
        base3, _ = env.run("uninterrupted-dims", sd, shards=2)
        test_stops(env, sd, base3, 2, ("esdctl",), tag="dims-")
        test_kill_all(env, s, base2, 2)
        test_kill_all(env, s, base2, 2, mixed=True)
        test_node_killed(env, s, base)
        test_corrupt_state(env, s)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
