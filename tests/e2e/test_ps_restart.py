"""kill -9 of the PS mid-run, restart from its checkpoint: the node daemons
notice, reconnect, roll their caches and dispatchers back to the
checkpoint boundary, and training ends bit-identical to an uninterrupted
run. Twice: the default (hybrid, on-demand sync) and HET with staleness 0,
whose snapshots also carry every key's version across the restart, and
a job of per-table dims (model.dims), its checkpoint version 2. The
shard count and the checkpoint period do not change a job's tables: the
cases of the default method share one uninterrupted run (one shard). HET with
staleness > 0 cannot resume exactly (stale copies' values at the boundary
are gone): the daemons stop with an error saying so.

usage: test_ps_restart.py BIN_DIR
"""
import os
import signal
import subprocess
import sys
import time

from e2e_util import Env, ClusterError, ctl, shard_files, wait_ps


CASES = [
    ("", {}),
    ("het-", {"dispatch__method": "vanilla", "dispatch__sync": "het",
              "dispatch__staleness": 0}),
    # per-table dims: the shard restores rows at their tables' dims from
    # its version-2 checkpoint
    ("dims-", {"model__dim": 16, "model__dims": "4,8*12,16*12,4"}),
]
ITERS = 150  # the kill comes at iteration 50 or later, the restore at 40


def main():
    env = Env(sys.argv[1], "ps-restart")
    env.gen_stream(samples=20000)
    bases = {tag: restart_case(env, tag, over) for tag, over in CASES}
    # several shards: the others go back to the restarted one's checkpoint
    restart_case(env, "2-shards-kill-1-", {}, shards=2, victim=1, base=bases[""])
    restart_case(env, "3-shards-kill-0-", {}, shards=3, victim=0, base=bases[""])
    # checkpoints every 1 and 3 iterations: the dispatchers run up to three
    # iterations ahead of the shards' checkpoints and keep what it takes
    restart_case(env, "every-1-", {"ps__checkpoint_every": 1}, base=bases[""])
    restart_case(env, "every-3-2-shards-", {"ps__checkpoint_every": 3}, shards=2, victim=1,
                 base=bases[""])
    het_stale_refused(env)
    setting_undone(env)
    return env.finish()


def setting_undone(env):
    """esdctl set after the last checkpoint, then the PS dies: every node
    resumes with the settings of the checkpoint boundary (emulated compute:
    slow enough to place the change and the kill between two checkpoints;
    its zero gradients leave the tables as they are, so the checks are the
    settings and the agreeing digests)."""
    s = env.settings(job__iterations=120, ps__checkpoint_every=40)
    from esdcluster import Cluster
    work = os.path.join(env.root, "undone")
    ck = os.path.join(work, "ckpt")
    os.makedirs(ck, exist_ok=True)
    s["ps.checkpoint_dir"] = ck
    try:
        with Cluster(env.bin, work, s, emulate_ns=1000000, restart_shards=True) as c:
            c.start()
            sock = os.path.join(work, "ps0.sock")
            wait_ps(sock, 44)
            r = subprocess.run([os.path.join(env.bin, "esdctl"), "--socket", sock, "set",
                                "dispatch.method", "opt"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, timeout=30)
            at = int(r.stdout.split("from iteration")[1].split()[0]) if r.returncode == 0 \
                else None
            env.check(at is not None and 40 < at < 80, "undone: method opt scheduled at %s "
                      "(%s)" % (at, r.stderr.strip()))
            wait_ps(sock, (at or 60) + 2)
            c.kill("ps0", signal.SIGKILL)
            time.sleep(0.3)
            c.start_ps(0, restore=True)
            c.wait(timeout=120)
            sums = c.summaries()
        with open(os.path.join(work, "esdd1.log")) as f:
            log = f.read()
        env.check("a later esdctl set is undone" in log and "method hybrid" in log,
                  "undone: the nodes resumed at 40 with the method of that boundary")
        env.check(all(sm["method"] == "hybrid" for sm in sums),
                  "undone: every summary says hybrid: %s" % [sm["method"] for sm in sums])
        env.check(all(sm["iterations"] == 120 for sm in sums),
                  "undone: every node ends the job (the decision digests agreed)")
    except (ClusterError, subprocess.TimeoutExpired, IndexError, ValueError) as e:
        env.check(False, "undone: %s" % e)


def het_stale_refused(env):
    s = env.settings(job__iterations=100000, ps__checkpoint_every=20,
                     dispatch__method="vanilla", dispatch__sync="het", dispatch__staleness=2)
    from esdcluster import Cluster
    work = os.path.join(env.root, "het2")
    s["ps.checkpoint_dir"] = os.path.join(work, "ckpt")
    os.makedirs(s["ps.checkpoint_dir"], exist_ok=True)
    try:
        # (a restarter would bring the shard back: the daemons try to resume)
        with Cluster(env.bin, work, s, restart_shards=True) as c:
            c.start()
            sock = os.path.join(work, "ps0.sock")
            it, t0 = 0, time.time()
            while it < 25 and time.time() - t0 < 60:
                try:
                    it = ctl(sock, "status")["iteration"]
                except OSError:
                    pass
                time.sleep(0.005)
            c.kill("ps0", signal.SIGKILL)
            try:
                c.wait(timeout=60)
            except ClusterError:
                pass
    except ClusterError:
        pass
    with open(os.path.join(work, "esdd0.log")) as f:
        log = f.read()
    env.check("cannot resume from a checkpoint" in log,
              "het staleness 2: a lost PS stops the daemons with the reason")


def restart_case(env, tag, over, shards=1, victim=0, base=None):
    """kill -9 of shard 'victim' of 'shards' mid-run and its restart with
    --restore: every node and every other shard go back to its checkpoint
    and the job ends bit-identical to an uninterrupted run (base: its
    final checkpoint, else this case runs it). Returns that checkpoint."""
    s = env.settings(job__iterations=ITERS, **dict({"ps__checkpoint_every": 20}, **over))
    base_ck = base
    try:
        if base_ck is None:
            base_ck, _ = env.run(tag + "uninterrupted", s)
        from esdcluster import Cluster
        work = os.path.join(env.root, tag + "restarted")
        ck = os.path.join(work, "ckpt")
        os.makedirs(ck, exist_ok=True)
        s2 = dict(s)
        s2["ps.checkpoint_dir"] = ck
        with Cluster(env.bin, work, s2, shards=shards, restart_shards=True) as c:
            c.start()
            sock = os.path.join(work, "ps0.sock")
            it = 0
            t0 = time.time()
            while it < 50 and time.time() - t0 < 60:
                try:
                    it = ctl(sock, "status")["iteration"]
                except OSError:
                    pass
                time.sleep(0.005)
            env.check(50 <= it < ITERS, "%sshard %d of %d is killed mid-run (at iteration %d)"
                      % (tag, victim, shards, it))
            c.kill("ps%d" % victim, signal.SIGKILL)
            time.sleep(0.3)
            c.start_ps(victim, restore=True)
            c.wait(timeout=120)
            sums = c.summaries()
        env.check(all(sm["iterations"] == ITERS for sm in sums),
                  "%severy daemon finished all %d iterations" % (tag, ITERS))
        with open(os.path.join(work, "esdd0.log")) as f:
            log = f.read()
        env.check("resumed at iteration" in log, "%sdaemon 0 resumed from the checkpoint" % tag)
        for other in range(shards):
            if other == victim:
                continue
            with open(os.path.join(work, "ps%d.log" % other)) as f:
                back = [ln for ln in f.read().splitlines() if "back to checkpoint" in ln]
            env.check(len(back) == 1, "%sshard %d went back to the same checkpoint: %s"
                      % (tag, other, back))
        ok, out = env.compare(shard_files(ck, shards), base_ck, exact=True)
        env.check(ok, "%sfinal tables bit-identical to the uninterrupted run: %s" % (tag, out))
    except ClusterError as e:
        env.check(False, "%scluster: %s" % (tag, e))
    return base_ck


if __name__ == "__main__":
    sys.exit(main())
