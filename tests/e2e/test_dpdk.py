"""esdd <-> esd-ps over DPDK net_memif on one host (ps.backend = dpdk, each
shard's address a memif control socket; every process runs its own EAL
with --no-pci --no-huge), real processes, the job key on every link:
- BSP exactness: the final tables equal the single-process reference, the
  rows counted on every link equal the prediction, with 1 and 2 shards;
- a node daemon killed mid-iteration is detected: every process exits
  non-zero, the shard naming the worker, as over TCP;
- 20 jobs started and ended one after another (a graceful end, every
  process exit 0, in the order trainers, daemons, shards): no memif
  receiver crashes when its peer leaves first.
Skips (77) when the dpdk backend is not built or its EAL cannot start.

usage: test_dpdk.py BIN_DIR
"""
import os
import signal
import sys
import tempfile
import time

from e2e_util import Env, ClusterError, dpdk_usable, exit_codes, shard_files, wait_ps
from esdcluster import Cluster


def memif_cluster(env, work, settings, shards=1, **kw):
    """A Cluster whose shards listen on memif sockets in a fresh folder."""
    socks = tempfile.mkdtemp(prefix="esd-memif-")
    s = dict(settings, **{"ps.backend": "dpdk"})
    return Cluster(env.bin, work, s, shards=shards,
                   ps_listen=lambda sh: os.path.join(socks, "ps%d.sock" % sh), **kw)


def test_exact(env, name, settings, shards):
    work, ck = env.run_dirs(settings, name)
    with memif_cluster(env, work, settings, shards=shards) as c:  # reference trainers
        c.start()
        c.wait(timeout=180)
        sums = c.summaries()
    env.check(all(ln["backend"] == "dpdk" and not ln["reliable"] for sm in sums
                  for ln in sm["links"]),
              "%s: every link is dpdk memif, no reliable layer (memif loses nothing)" % name)
    env.check_transfers(name, sums)
    ok, out = env.compare(shard_files(ck, shards), env.reference(name, settings))
    env.check(ok, "%s over memif: final tables == single-process reference: %s"
              % (name, out.splitlines()[-1] if out else ""))


def test_node_killed(env):
    s = env.settings(job__iterations=100000)
    work = os.path.join(env.root, "killed")
    with memif_cluster(env, work, s, emulate_ns=20000) as c:
        c.start()
        wait_ps(os.path.join(work, "ps0.sock"), 3)  # every node attached and running
        os.kill(c.procs["esdd1"].pid, signal.SIGKILL)
        t_kill = time.time()
        rcs = exit_codes(c.procs)
        took = time.time() - t_kill
    with open(os.path.join(work, "ps0.log")) as f:
        ps_log = f.read()
    others = {n: rc for n, rc in rcs.items() if n != "esdd1"}
    env.check(all(rc not in (0, "still running") for rc in others.values()) and took < 5,
              "esdd 1 killed over memif: every other process exits non-zero %.1f s later: %s"
              % (took, rcs))
    # DPDK 22.11's memif unmaps a dead peer's rings in its interrupt thread
    # while a burst may be reading them; the fault is caught
    # (transport/dpdk_guard.c): the shard fails the job, it does not crash.
    env.check(rcs.get("ps0") == 1 and "SEGV" not in ps_log,
              "the shard did not crash (exit %s)" % rcs.get("ps0"))
    env.check("worker 1 went away" in ps_log,
              "the shard names the worker: %s"
              % [ln for ln in ps_log.splitlines() if "worker 1 went away" in ln][:1])


def test_many_ends(env, rounds=20):
    s = env.settings(job__iterations=5, workers__n=2)
    bad = []
    t0 = time.time()
    for i in range(rounds):
        work = os.path.join(env.root, "end%d" % i)
        with memif_cluster(env, work, s) as c:
            c.start()
            try:
                c.wait(timeout=60)
            except ClusterError as e:
                bad.append("round %d: %s" % (i, e))
            rcs = exit_codes(c.procs, timeout=20)
        if any(rc != 0 for rc in rcs.values()):
            bad.append("round %d: %s" % (i, rcs))
    env.check(not bad, "%d memif jobs started and ended in %.0f s: every process exit 0, no "
              "crash %s" % (rounds, time.time() - t0, bad[:3]))


def main():
    env = Env(sys.argv[1], "dpdk")
    env.gen_stream()
    try:
        ok, why = dpdk_usable(
            os.path.join(env.root, "probe"),
            lambda work: memif_cluster(env, work, env.settings(job__iterations=1, workers__n=2)))
        if not ok:
            print("SKIP: dpdk memif cannot run here: %s" % why)
            return 77
        test_exact(env, "hybrid", env.settings(), 1)
        test_exact(env, "opt-2-shards", env.settings(dispatch__method="opt"), 2)
        test_node_killed(env)
        test_many_ends(env)
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
