"""esd-testbed --netns: each process of the cluster in its own network
namespace, its links shaped by tc (NetNS, the Cluster's hooks).

Standard library only (any python3).
"""
import json
import os
import shutil
import socket
import subprocess
import time

from esdcluster import ctl_call


class NetnsError(RuntimeError):
    pass


class NetNS:
    """--netns: the PS in one network namespace, each node daemon in its own,
    one veth pair between the PS's namespace and each node's, shaped by tc
    tbf at the node's rate in both directions. The transport's token buckets
    are switched off (link.rate 0 on every daemon, set before the trainers
    attach); the job keeps its rates, which the dispatchers' costs use.
    Nothing is attached to the host's own network: traffic stays on the
    veth pairs. Every namespace is deleted at exit (that removes the veths).
    Trainers stay in the host namespace: they only use unix sockets and
    shared memory."""

    def __init__(self, n, rates_bps, bridge=False, af_packet=False):
        """bridge: the shape of several hosts on one segment instead (what
        --backend dpdk runs on, and tcp with --segment): every namespace's
        one interface, esd0 (MTU 9000, 10.213.0.1 the PS's, 10.213.0.2+w
        node w's), on a bridge in a switch namespace; each node's veth
        shaped both ways. af_packet: the shards listen with net_af_packet on
        the PS's esd0 (else over TCP on its address)."""
        self.n, self.rates, self.bridge = n, rates_bps, bridge
        self.af_packet = af_packet
        tag = "esdtb%d" % (os.getpid() % 100000)
        self.sw_ns = tag + "sw"
        self.ps_ns = tag + "ps"
        self.w_ns = ["%sw%d" % (tag, w) for w in range(n)]
        self.veth = [("e%dp%d" % (os.getpid() % 100000, w), "e%dw%d" % (os.getpid() % 100000, w))
                     for w in range(n)]
        self.made = []
        self.port = 7700

    @staticmethod
    def _ip(*a):
        r = subprocess.run(list(a), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode:
            raise NetnsError("--netns: '%s' failed: %s" % (" ".join(a), r.stdout.strip()))

    def addr(self, w, side):
        if self.bridge:
            return "10.213.0.%d" % (1 if side == "ps" else 2 + w)
        return "10.213.%d.%d" % (w, 1 if side == "ps" else 2)

    def __enter__(self):
        if os.geteuid() != 0:
            raise NetnsError("--netns needs root (network namespaces, tc)")
        for t in ("ip", "tc"):
            if not shutil.which(t):
                raise NetnsError("--netns needs the '%s' command (iproute2)" % t)
        try:
            for ns in ([self.sw_ns] if self.bridge else []) + [self.ps_ns] + self.w_ns:
                self._ip("ip", "netns", "add", ns)
                self.made.append(ns)
                self._ip("ip", "-n", ns, "link", "set", "lo", "up")
            if self.bridge:
                self._segment()
                return self
            for w in range(self.n):
                p, q = self.veth[w]
                self._ip("ip", "link", "add", p, "netns", self.ps_ns, "type", "veth", "peer",
                         "name", q, "netns", self.w_ns[w])
                for ns, dev, side in ((self.ps_ns, p, "ps"), (self.w_ns[w], q, "w")):
                    self._ip("ip", "-n", ns, "addr", "add", self.addr(w, side) + "/30", "dev",
                             dev)
                    self._ip("ip", "-n", ns, "link", "set", dev, "up")
                    rate = int(self.rates[w])
                    if rate:
                        burst = max(rate // 8 // 100, 1 << 20)  # 10 ms, at least 1 MiB
                        self._ip("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
                                 "rate", "%dbit" % rate, "burst", str(burst), "latency",
                                 "1s")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _shape(self, ns, dev, rate):
        rate = int(rate)
        if rate:
            burst = max(rate // 8 // 100, 1 << 20)  # 10 ms, at least 1 MiB
            self._ip("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                     "%dbit" % rate, "burst", str(burst), "latency", "1s")

    def _segment(self):
        self._ip("ip", "-n", self.sw_ns, "link", "add", "br0", "type", "bridge")
        self._ip("ip", "-n", self.sw_ns, "link", "set", "br0", "up")
        for i, ns in enumerate([self.ps_ns] + self.w_ns):
            port = "p%d" % i
            self._ip("ip", "link", "add", "esd0", "netns", ns, "mtu", "9000", "type", "veth",
                     "peer", "name", port, "netns", self.sw_ns, "mtu", "9000")
            self._ip("ip", "-n", ns, "link", "set", "esd0", "up")
            self._ip("ip", "-n", ns, "addr", "add",
                     self.addr(i - 1, "ps" if i == 0 else "w") + "/24", "dev", "esd0")
            self._ip("ip", "-n", self.sw_ns, "link", "set", port, "master", "br0")
            self._ip("ip", "-n", self.sw_ns, "link", "set", port, "up")
            if i:  # a node: its uplink and its downlink
                self._shape(ns, "esd0", self.rates[i - 1])
                self._shape(self.sw_ns, port, self.rates[i - 1])

    def __exit__(self, *exc):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self.made = []
        return False

    # Cluster hooks
    def wrap(self, name):
        if name.startswith("ps"):
            return ["ip", "netns", "exec", self.ps_ns]
        if name.startswith("esdd"):
            return ["ip", "netns", "exec", self.w_ns[int(name[4:])]]
        return []

    def ps_listen(self, shard):
        if self.af_packet:
            return "esd0"  # af_packet on the PS's interface
        return "0.0.0.0:0"  # inside the PS namespace only

    def daemon_ps(self, rank, ps_addrs):
        if self.af_packet:
            return ",".join(ps_addrs)  # af_packet: each node's own esd0
        return ",".join("%s:%s" % (self.addr(rank, "ps"), a.rsplit(":", 1)[1])
                        for a in ps_addrs)

    def after_daemons(self, c):
        """Token buckets off on every daemon once its links are open."""
        for w in range(c.n):
            sock = os.path.join(c.node_dir(w), "control.sock")
            t0 = time.time()
            while True:
                try:
                    links = ctl_call(sock, "links", timeout=2).get("links", [])
                    if len(links) >= c.shards:
                        break
                except (OSError, ValueError):
                    pass
                if time.time() - t0 > 30:
                    raise NetnsError("--netns: esdd%d did not open its links" % w)
                time.sleep(0.05)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2)
            try:
                s.connect(sock)
                s.sendall((json.dumps({"cmd": "set", "key": "link.rate", "value": "0"})
                           + "\n").encode())
                rep = json.loads(s.makefile().readline())
            finally:
                s.close()
            if not rep.get("ok"):
                raise NetnsError("--netns: esdd%d refused link.rate 0: %s"
                                   % (w, rep.get("error")))
