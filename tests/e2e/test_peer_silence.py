"""A peer that dies or falls silent ends the job in seconds (real esd-ps,
esdd and trainer processes, real sockets; job.heartbeat_ms 500,
job.peer_timeout_ms 3000, the defaults):
- kill -9 of the shard, nothing restarting it (job.restart_shards off):
  every process exits non-zero, the daemons naming the shard and its
  address;
- SIGSTOP of an esdd: the shard hears nothing from it for the peer
  timeout and fails the job naming the worker and its address; every
  other process exits non-zero; the same for esdd0, the node that decides
  for every node, whose kill -9 ends the job too, the other daemon naming
  worker 0;
- SIGSTOP of the esd-ps: the daemons hear nothing from it and fail the
  job naming the shard; every other process exits non-zero;
- one frame of a daemon's link held back on the path (a relay in this
  process), on a keyed link (the relay forwards what follows: the next
  frame, a heartbeat at the latest, fails its tag) and on an unkeyed one
  (the relay holds what follows too, as a stalled path does: the shard
  hears nothing);
- a host's veth taken down (network namespaces made here; skipped
  without root or iproute2): its peers hear nothing and the job fails
  naming the host's address.
Each case prints its measured time and asserts at most 5 s from the
event to the last process's exit.

usage: test_peer_silence.py BIN_DIR
"""
import os
import shutil
import signal
import sys
import time

from e2e_util import Env, ClusterError, BridgedHosts, FrameRelay, sh, wait_ps
from esdcluster import Cluster

BOUND_S = 5.0


def wait_exits(c, names, limit=30.0):
    """Wait for processes names of cluster c: (the time the last one
    exited, or None if one still runs after limit s; their exit codes)."""
    t0, rcs, last = time.time(), {}, None
    while time.time() - t0 < limit and len(rcs) < len(names):
        for n in names:
            if n not in rcs and c.procs[n].poll() is not None:
                rcs[n] = c.procs[n].returncode
                last = time.time()
        time.sleep(0.01)
    for n in names:
        rcs.setdefault(n, "still running")
    return (last if "still running" not in rcs.values() else None), rcs


def log_of(work, name):
    p = os.path.join(work, name + ".log")
    if not os.path.exists(p):
        return ""
    with open(p) as f:
        return f.read()


def lines_with(text, *words):
    return [ln for ln in text.splitlines() if all(w in ln for w in words)][:2]


def started(env, work, s, **kw):
    c = Cluster(env.bin, work, s, emulate_ns=20000, **kw)
    c.__enter__()
    c.start()
    wait_ps(os.path.join(work, "ps0.sock"), 10)
    return c


def check_bound(env, what, t_event, t_last, rcs):
    took = t_last - t_event if t_last is not None else None
    print("# %s -> every process exited: %s s" % (what, "%.1f" % took if took is not None
                                                  else "not within 30"))
    env.check(took is not None and took <= BOUND_S and
              all(rc not in (0, "still running") for rc in rcs.values()),
              "%s: every process exits non-zero within %.0f s: %s s, %s"
              % (what, BOUND_S, took, rcs))


def signal_one(env, work, s, name, sig):
    """Start a cluster in work, send sig to process name (SIGSTOP: left
    stopped until the others have exited, then killed), wait for the
    processes that are neither name nor its node's trainers; (the
    cluster, t0, the time the last exited or None, their exit codes)."""
    c = started(env, work, s)
    try:
        node = name[len("esdd"):] if name.startswith("esdd") else None
        gone = [n for n in c.procs
                if n == name or (node is not None and n.startswith("trainer" + node))]
        others = [n for n in c.procs if n not in gone]
        t0 = time.time()
        os.kill(c.procs[name].pid, sig)
        last, rcs = wait_exits(c, others)
        if sig == signal.SIGSTOP:
            os.kill(c.procs[name].pid, signal.SIGKILL)
            os.kill(c.procs[name].pid, signal.SIGCONT)
    finally:
        c.__exit__(None, None, None)
    return c, t0, last, rcs


def test_kill_shard(env, s):
    work = os.path.join(env.root, "kill-shard")
    c, t0, last, rcs = signal_one(env, work, s, "ps0", signal.SIGKILL)
    check_bound(env, "kill -9 shard", t0, last, rcs)
    log = log_of(work, "esdd0")
    env.check(lines_with(log, "shard 0", c.ps_addr[0], "restart_shards"),
              "kill -9 shard: the daemon names the shard, its address and why nothing "
              "waits: %s" % lines_with(log, "shard 0"))


def test_stop_daemon(env, s, w=1):
    """SIGSTOP of esdd w; w = 0 is the node that decides for every node
    (docs/design.md §5, One decider)."""
    work = os.path.join(env.root, "stop-esdd%d" % w)
    name = "esdd%d" % w
    _, t0, last, rcs = signal_one(env, work, s, name, signal.SIGSTOP)
    check_bound(env, "SIGSTOP " + name, t0, last, rcs)
    log = log_of(work, "ps0")
    env.check(lines_with(log, "worker %d" % w, "heard nothing from"),
              "SIGSTOP %s: the shard names the worker, its address and the silence: %s"
              % (name, lines_with(log, "worker %d" % w)))


def test_kill_decider(env, s):
    """kill -9 of esdd0, the node deciding for all: the shard fails the job
    naming worker 0, and the other node (waiting for its order, or at the
    barrier) ends within the bound, saying why."""
    work = os.path.join(env.root, "kill-decider")
    _, t0, last, rcs = signal_one(env, work, s, "esdd0", signal.SIGKILL)
    check_bound(env, "kill -9 esdd0 (the decider)", t0, last, rcs)
    log = log_of(work, "esdd1")
    env.check(lines_with(log, "worker 0", "went away"),
              "kill -9 esdd0: the other daemon names worker 0: %s"
              % lines_with(log, "shard 0 reports"))


def test_stop_shard(env, s):
    work = os.path.join(env.root, "stop-ps")
    _, t0, last, rcs = signal_one(env, work, s, "ps0", signal.SIGSTOP)
    check_bound(env, "SIGSTOP esd-ps", t0, last, rcs)
    log = log_of(work, "esdd0")
    env.check(lines_with(log, "shard 0", "heard nothing from"),
              "SIGSTOP esd-ps: the daemon names the shard, its address and the silence: %s"
              % lines_with(log, "shard 0"))


class HoldRelay(FrameRelay):
    """On the path of one daemon's link: holds back the daemon's frame
    number 'at'; stall: what follows it is held back too (a path that
    delivers in order), else forwarded."""

    def __init__(self, upstream, at, stall):
        self.at, self.stall, self.held_at = at, stall, None
        super().__init__(upstream)

    def on_frame(self, n, frame):
        if n == self.at and self.held_at is None:
            self.held_at = time.time()
            return None
        return None if self.held_at is not None and self.stall else frame


def test_withheld(env, s, keyed):
    what = "one frame held back, %s link" % ("keyed" if keyed else "unkeyed tcp")
    work = os.path.join(env.root, "withheld-" + ("keyed" if keyed else "plain"))
    relays = []

    def via_relay(rank, ps_addrs):
        if rank != 1:
            return ",".join(ps_addrs)
        relays.append(HoldRelay(ps_addrs[0], at=300, stall=not keyed))
        return relays[-1].addr

    s = dict(s) if keyed else dict(s, **{"job.insecure": "yes"})
    with Cluster(env.bin, work, s, emulate_ns=20000, daemon_ps=via_relay) as c:
        c.start()
        t0 = time.time()
        while relays[0].held_at is None and time.time() - t0 < 60:
            time.sleep(0.01)
        last, rcs = wait_exits(c, list(c.procs))
    relays[0].close()
    check_bound(env, what, relays[0].held_at or time.time(), last, rcs)
    log = log_of(work, "ps0")
    words = ("worker 1", "authentication") if keyed else ("worker 1", "heard nothing from")
    env.check(lines_with(log, *words), "%s: the shard names %s: %s"
              % (what, " and ".join(words), lines_with(log, "worker 1")))


def Hosts(n=2):
    """The shard at 10.79.0.1, node w at 10.79.0.(2 + w), each on its veth esd0."""
    return BridgedHosts("hs", n)


def test_veth_down(env, s):
    """Node 1's host vanishes: its veth goes down (no FIN, no RST)."""
    what = "veth of node 1 down"
    work = os.path.join(env.root, "veth")
    with Hosts() as hosts:
        with Cluster(env.bin, work, dict(s, **{"workers.n": 2}), emulate_ns=20000,
                     wrap=hosts.wrap, ps_listen=lambda sh_: "10.79.0.1:0") as c:
            c.start()
            wait_ps(os.path.join(work, "ps0.sock"), 10)
            gone = [n for n in c.procs if n == "esdd1" or n.startswith("trainer1")]
            others = [n for n in c.procs if n not in gone]
            t0 = time.time()
            sh("ip", "-n", hosts.nodes[1], "link", "set", "esd0", "down")
            last, rcs = wait_exits(c, others)
    check_bound(env, what, t0, last, rcs)
    log = log_of(work, "ps0")
    env.check(lines_with(log, "worker 1", "10.79.0.3", "heard nothing from"),
              "%s: the shard names the worker, the host's address and the silence: %s"
              % (what, lines_with(log, "worker 1")))


def main():
    env = Env(sys.argv[1], "peer-silence")
    env.gen_stream(samples=20000)
    s = env.settings(job__iterations=100000, workers__n=2)
    try:
        test_kill_shard(env, s)
        test_stop_daemon(env, s)
        test_stop_daemon(env, s, w=0)
        test_kill_decider(env, s)
        test_stop_shard(env, s)
        test_withheld(env, s, keyed=True)
        test_withheld(env, s, keyed=False)
        if os.geteuid() != 0 or not shutil.which("ip"):
            print("# skipped: a host's veth down (network namespaces need root and ip)")
        else:
            test_veth_down(env, s)
    except (ClusterError, RuntimeError) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
