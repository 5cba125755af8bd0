"""esdd <-> esd-ps over DPDK net_af_packet between hosts emulated by network
namespaces (the shape of test_multihost.py): a switch namespace with a
bridge, a PS host running both shards on its one interface, and four node
hosts, each host's interface named esd0 (ps.dpdk_port = af_packet:esd0 on
every host), MTU 9000 (ps.dpdk_mtu = 8192), each node's veth shaped by tc
tbf at its rate both ways, MAC addresses learned, the job key on every link:
- BSP exactness: the final tables equal the single-process reference, the
  rows counted on every link equal the prediction, every link dpdk with its
  reliable layer; one shard interface serves all four nodes, and the two
  shards of one host are told apart on it;
- a node daemon killed mid-iteration is detected: every process exits
  non-zero, the shard naming the worker;
- a shard killed and restarted with --restore: its RST tells the nodes at
  once that their links are gone; they reconnect and the job ends equal to
  the reference.
Skips (77) when the dpdk backend is not built, its EAL cannot start, or
namespaces cannot be made (not root, no ip/tc).

usage: test_dpdk_netns.py BIN_DIR
"""
import os
import shutil
import signal
import sys
import time

from e2e_util import (Env, ClusterError, BridgedHosts, dpdk_usable, exit_codes,
                      shard_files, wait_ps)
from esdcluster import Cluster

RATES = [1000000000, 1000000000, 200000000, 200000000]  # tc tbf, bit/s


def Hosts(n=4):
    """Every host's interface is esd0, node w's shaped at RATES[w], jumbo frames."""
    return BridgedHosts("dn", n, addr=False, rates=RATES, mtu=9000)


def settings(env, **over):
    s = env.settings(**over)
    s.update({"ps.backend": "dpdk", "ps.dpdk_port": "af_packet:esd0", "ps.dpdk_mtu": 8192,
              "workers.rates": ",".join(str(r) for r in RATES),
              "workers.link_rates": "0,0,0,0"})  # tc shapes the links
    return s


def cluster(env, hosts, work, s, shards, **kw):
    return Cluster(env.bin, work, s, shards=shards, wrap=hosts.wrap,
                   ps_listen=lambda sh_: "esd0", **kw)


def test_exact(env, hosts):
    name = "af_packet-2-shards"
    s = settings(env)
    work, ck = env.run_dirs(s, name)
    with cluster(env, hosts, work, s, 2) as c:
        c.start()
        c.wait(timeout=240)
        sums = c.summaries()
    env.check(all(ln["backend"] == "dpdk" and ln["reliable"] for sm in sums
                  for ln in sm["links"]) and all(len(sm["links"]) == 2 for sm in sums),
              "%s: every node has a dpdk link to each shard, its reliable layer on" % name)
    env.check_transfers(name, sums)
    ok, out = env.compare(shard_files(ck, 2), env.reference(name, s))
    env.check(ok, "%s over af_packet: final tables == single-process reference: %s"
              % (name, out.splitlines()[-1] if out else ""))


def test_node_killed(env, hosts):
    s = settings(env, job__iterations=100000)
    work = os.path.join(env.root, "killed")
    with cluster(env, hosts, work, s, 1, emulate_ns=20000) as c:
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
              "esdd 1 killed over af_packet: every other process exits non-zero %.1f s "
              "later: %s" % (took, rcs))
    # the link's heartbeats stop with the process: the peer timeout names the silence
    env.check("worker 1 went away" in ps_log and "heard nothing from" in ps_log,
              "the shard names the worker and the silence: %s"
              % [ln for ln in ps_log.splitlines() if "worker 1 went away" in ln][:1])


def test_shard_restarted(env, hosts):
    name = "af_packet-restart"
    # the shard is killed as soon as the first checkpoint (iteration 5) is
    # on disk, with most of the job still to run
    s = settings(env, job__iterations=60, ps__checkpoint_every=5)
    work, ck = env.run_dirs(s, name)
    # the reference trainers; this test restarts the shard
    with cluster(env, hosts, work, s, 1, restart_shards=True) as c:
        c.start()
        t0 = time.time()
        done = os.path.join(ck, "ps-shard0.ckpt")  # complete, not its .tmp
        while time.time() - t0 < 60 and not os.path.exists(done):
            time.sleep(0.01)
        c.kill("ps0", signal.SIGKILL)
        time.sleep(0.3)
        t_restart = time.time()
        c.start_ps(0, restore=True)
        c.wait(timeout=240)
        took = time.time() - t_restart
        sums = c.summaries()
    logs = ""
    for w in range(4):
        with open(os.path.join(work, "esdd%d.log" % w)) as f:
            logs += f.read()
    env.check("does not know this link" in logs,
              "%s: the restarted shard's RST ended the nodes' old links: %s" % (
                  name, [ln.strip()[:160] for ln in logs.splitlines()
                         if "does not know this link" in ln][:1]))
    env.check(all(sm["iterations"] == 60 for sm in sums),
              "%s: every node ended the job %.1f s after the restart" % (name, took))
    ok, out = env.compare(shard_files(ck, 1), env.reference(name, s))
    env.check(ok, "%s: final tables == single-process reference: %s"
              % (name, out.splitlines()[-1] if out else ""))


def main():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        print("SKIP: network namespaces need root and iproute2 (ip, tc)")
        return 77
    env = Env(sys.argv[1], "dpdk-netns")
    env.gen_stream()
    try:
        with Hosts() as hosts:
            ok, why = dpdk_usable(
                os.path.join(env.root, "probe"),
                lambda work: cluster(env, hosts, work, settings(env, job__iterations=1), 1),
                markers=("not built", "EAL did not start"))
            if not ok:
                print("SKIP: dpdk af_packet cannot run here: %s" % why)
                return 77
            test_exact(env, hosts)
            test_node_killed(env, hosts)
            test_shard_restarted(env, hosts)
    except (ClusterError, RuntimeError) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
