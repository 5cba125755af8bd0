"""Helpers of the end-to-end tests: a small stream, a cluster run, the checks."""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "testbed"))
from esdcluster import Cluster, ClusterError  # noqa: E402

KINDS = ("miss_pull", "update_push", "evict_push")


class Env:
    def __init__(self, bin_dir, name):
        self.bin = bin_dir
        self.root = tempfile.mkdtemp(prefix="esd-%s." % name)
        self.stream = os.path.join(self.root, "stream.esd")
        self.failures = []

    def gen_stream(self, samples=8000, seed=7):
        subprocess.run([os.path.join(self.bin, "esd-data"), "gen", "-o", self.stream,
                        "--shape", "criteo-kaggle", "-n", str(samples), "--scale", "1000",
                        "--max-rows", "2000", "--seed", str(seed)],
                       check=True, stdout=subprocess.DEVNULL)

    def settings(self, **over):
        s = {"workers.n": 4, "workers.batch": 32, "model.dim": 8, "model.hidden": 8,
             "model.optimizer": "adagrad", "model.lr": 0.05, "job.seed": 11,
             "job.iterations": 50, "data.stream": self.stream, "cache.ratio": 0.08,
             "dispatch.method": "hybrid", "dispatch.alpha": 0.25}
        s.update({k.replace("__", "."): v for k, v in over.items()})
        return s

    def run(self, name, settings, emulate_ns=None, during=None, timeout=120, shards=1):
        """One cluster run to its end: (the final checkpoint, as esd-ref
        compare takes it: the shards' files joined by commas; the
        summaries)."""
        settings = dict(settings)
        work, ck = self.run_dirs(settings, name)
        with Cluster(self.bin, work, settings, emulate_ns=emulate_ns, shards=shards) as c:
            c.start()
            if during:
                during(c)
            c.wait(timeout=timeout)
            sums = c.summaries()
        return shard_files(ck, shards), sums

    def hot_rows(self, count):
        """FAE's hot set of this env's stream (esd-data hot): its path."""
        out = os.path.join(self.root, "hot-rows.txt")
        subprocess.run([os.path.join(self.bin, "esd-data"), "hot", self.stream, "-n",
                        str(count), "-o", out], check=True, stdout=subprocess.DEVNULL)
        return out

    def reference(self, name, settings):
        out = os.path.join(self.root, name + ".ref.ckpt")
        k = sum(int(x) for x in str(settings["workers.batch"]).split(",")) \
            if "," in str(settings["workers.batch"]) \
            else int(settings["workers.batch"]) * int(settings["workers.n"])
        subprocess.run([os.path.join(self.bin, "esd-ref"), "--out", out, "--stream",
                        settings["data.stream"], "--iters", str(settings["job.iterations"]),
                        "--batch", str(k), "--seed", str(settings["job.seed"]),
                        *(["--dims", str(settings["model.dims"])] if "model.dims" in settings
                          else ["--dim", str(settings["model.dim"])]),
                        "--hidden", str(settings["model.hidden"]),
                        "--opt", settings["model.optimizer"], "--lr", str(settings["model.lr"])],
                       check=True, stdout=subprocess.DEVNULL)
        return out

    def compare(self, a, b, exact=False, rtol="1e-5", atol="2e-6", clocks=True):
        """Equal within |a-b| <= atol + rtol * max(|a|, |b|) per element, or bit
        for bit. Gradients travel as floats: each worker's partial sum of a
        shared row is rounded to float once (esd/optim.h sums in double
        everywhere else), which moves a few elements near zero by up to about
        1e-6 after 50 iterations; rows trained by one worker are bit-exact."""
        argv = [os.path.join(self.bin, "esd-ref"), "compare"]
        argv += ["--exact"] if exact else ["--rtol", rtol, "--atol", atol]
        argv += [] if clocks else ["--no-clocks"]
        r = subprocess.run(argv + [a, b], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        return r.returncode == 0, r.stdout.strip()

    def check(self, cond, what):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)

    def check_transfers(self, name, sums):
        """Rows counted on the links == the snapshot's prediction, per worker
        and kind; and summed over workers == the plan every node computed."""
        total = {k: 0 for k in KINDS}
        for sm in sums:
            link = link_rows([sm])
            for k in KINDS:
                total[k] += link[k]
            self.check(all(link[k] == sm["predicted"][k] for k in KINDS),
                       "%s worker %d: link rows %s == predicted %s"
                       % (name, sm["rank"], link, {k: sm["predicted"][k] for k in KINDS}))
        plan = sums[0]["plan_all_workers"]
        want = {"miss_pull": plan["miss_pull"],
                "update_push": plan["update_value"] + plan["update_grad"],
                "evict_push": plan["evict_push"]}
        self.check(total == want, "%s: links summed over workers %s == plan %s"
                   % (name, total, want))

    def run_dirs(self, settings, name="run"):
        """The work and checkpoint folders of one cluster run (created; the
        checkpoint folder goes into settings): (work, ckpt)."""
        work = os.path.join(self.root, name)
        ck = os.path.join(work, "ckpt")
        os.makedirs(ck, exist_ok=True)
        settings["ps.checkpoint_dir"] = ck
        return work, ck

    def check_end(self, name, sums, settings, ckpt_dir, rtol="1e-5", atol="2e-6"):
        """A run that ended: every node did every iteration, its links carried
        what it predicted, and the tables equal the single-process
        reference."""
        iters = int(settings["job.iterations"])
        self.check(all(sm["iterations"] == iters for sm in sums),
                   "the job ends on every node (the decision digests agreed)")
        self.check_transfers(name, sums)
        ref = self.reference(name, settings)
        ok, out = self.compare(os.path.join(ckpt_dir, "ps-shard0.ckpt"), ref, rtol=rtol,
                               atol=atol)
        self.check(ok, "final tables == single-process reference (rtol %s, atol %s): %s"
                   % (rtol, atol, out.splitlines()[-1] if out else ""))

    def finish(self):
        if self.failures:
            print("%d check(s) failed; files kept in %s" % (len(self.failures), self.root))
            return 1
        if not os.environ.get("ESD_TEST_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)
        return 0


def link_rows(sums):
    """Rows the links carried, per kind, summed over the summaries' workers."""
    link = {k: 0 for k in KINDS}
    for sm in sums:
        for ln in sm["links"]:
            link["miss_pull"] += ln["miss_pull"]["rx_rows"]
            link["update_push"] += ln["update_push"]["tx_rows"]
            link["evict_push"] += ln["evict_push"]["tx_rows"]
    return link


def shard_files(ck, shards):
    """The checkpoint of every shard in folder ck, as esd-ref compare takes
    a model: comma-separated."""
    return ",".join(os.path.join(ck, "ps-shard%d.ckpt" % s) for s in range(shards))


def poll_status(socks, done, deadline, every=0.02):
    """Every node's status until done(statuses) or the deadline; the last
    statuses read ([] when the job ended before any)."""
    import time
    sts = []
    try:
        while time.time() < deadline:
            sts = [ctl(x, "status") for x in socks]
            if done(sts):
                break
            time.sleep(every)
    except OSError:
        pass  # the job ended first: the caller's checks say so
    return sts


def wait_ps(sock, it, limit_s=60):
    """Wait up to limit_s for the shard at control socket sock to reach
    iteration it (every worker attached and past it); the last it read."""
    import time
    got, t0 = 0, time.time()
    while got < it and time.time() - t0 < limit_s:
        try:
            got = ctl(sock, "status")["iteration"]
        except OSError:
            pass
        time.sleep(0.005)
    return got


def ctl(path, cmd):
    """One control-socket command (JSON line) and its parsed reply."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall((json.dumps({"cmd": cmd}) + "\n").encode())
    buf = b""
    while not buf.endswith(b"\n"):
        part = s.recv(65536)
        if not part:
            break
        buf += part
    s.close()
    return json.loads(buf)


def exit_codes(procs, timeout=30):
    """{name: exit code, or "still running" after timeout s} of a cluster's
    processes, waiting for each."""
    rcs = {}
    for name, p in procs.items():
        try:
            rcs[name] = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rcs[name] = "still running"
    return rcs


def dpdk_usable(work, cluster, markers=("not built", "EAL", "no such transport")):
    """Whether a one-iteration dpdk job runs here: cluster(work) makes it.
    (True, "") when it ends; (False, its dpdk lines) when the logs of ps0 or
    esdd0 name one of markers (the backend is not built, the EAL did not
    start); any other failure is raised."""
    try:
        with cluster(work) as c:
            c.start()
            c.wait(timeout=60)
        return True, ""
    except ClusterError:
        logs = ""
        for name in ("ps0", "esdd0"):
            p = os.path.join(work, name + ".log")
            if os.path.exists(p):
                with open(p) as f:
                    logs += f.read()
        if any(m in logs for m in markers):
            return False, [ln for ln in logs.splitlines() if "EAL" in ln or "dpdk" in ln][:2]
        raise


def sh(*argv):
    """Run a set-up command (ip, tc); raise naming it and its output if it
    fails."""
    r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode:
        raise RuntimeError("'%s' failed: %s" % (" ".join(argv), r.stdout.strip()))


def bridge_port(sw, ns, dev, port, rate=0, mtu=None):
    """A veth from namespace ns (its end dev, up) to the bridge br0 of
    namespace sw (its end port, up); with rate (bit/s), tc tbf shapes both
    ends at it (burst 10 ms of traffic, at least 1 MiB; queue latency 1 s)."""
    m = ["mtu", str(mtu)] if mtu else []
    sh("ip", "link", "add", dev, "netns", ns, *m, "type", "veth", "peer", "name", port,
       "netns", sw, *m)
    sh("ip", "-n", ns, "link", "set", dev, "up")
    sh("ip", "-n", sw, "link", "set", port, "master", "br0")
    sh("ip", "-n", sw, "link", "set", port, "up")
    if rate:
        for n2, d in ((ns, dev), (sw, port)):
            sh("tc", "-n", n2, "qdisc", "add", "dev", d, "root", "tbf", "rate", "%dbit" % rate,
               "burst", str(max(rate // 800, 1 << 20)), "latency", "1s")


class NetnsBridge:
    """Hosts as network namespaces <tag><name> on one bridge (br0 in the
    namespace <tag>sw), each with a veth esd0; hosts: (name, address/24 or
    None, rate in bit/s or 0) per host; a rate shapes that host's veth both
    ways (tc tbf), mtu sets every veth's. Namespaces made are deleted on
    exit, also after a failed start."""

    DEV = "esd0"

    def __init__(self, tag, hosts, mtu=None):
        self.tag = tag
        self.names = [tag + h[0] for h in hosts]
        self.sw = tag + "sw"
        self.hosts, self.mtu = hosts, mtu
        self.made = []

    def __enter__(self):
        try:
            for ns in [self.sw] + self.names:
                sh("ip", "netns", "add", ns)
                self.made.append(ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.sw, "link", "set", "br0", "up")
            for i, (ns, (_, addr, rate)) in enumerate(zip(self.names, self.hosts)):
                bridge_port(self.sw, ns, self.DEV, "%ss%d" % (self.tag, i), rate, mtu=self.mtu)
                if addr:
                    sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", self.DEV)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self.made = []
        return False


class BridgedHosts(NetnsBridge):
    """A Cluster's hosts: <tag>ps (the shard) and <tag>n0.. (the nodes) on
    one bridge (NetnsBridge). With addr, the shard is 10.79.0.1 and node w
    10.79.0.(2 + w); rates[w] (bit/s) shapes node w's veth. wrap: the shard
    and the daemons run in their namespaces, trainers beside their daemon
    (unix sockets and shared memory only)."""

    def __init__(self, prefix, n, addr=True, rates=None, mtu=None):
        tag = "%s%d" % (prefix, os.getpid() % 10000)
        hosts = [("ps", "10.79.0.1" if addr else None, 0)]
        hosts += [("n%d" % w, "10.79.0.%d" % (2 + w) if addr else None,
                   rates[w] if rates else 0) for w in range(n)]
        super().__init__(tag, hosts, mtu=mtu)
        self.ps, self.nodes = self.names[0], self.names[1:]

    def wrap(self, name):
        if name.startswith("ps"):
            return ["ip", "netns", "exec", self.ps]
        if name.startswith("esdd"):
            return ["ip", "netns", "exec", self.nodes[int(name[4:])]]
        return []


class FrameRelay:
    """A man in the middle of one daemon's link to a shard: forwards the
    shard's bytes as they come and the daemon's frame by frame (the frame
    header's body length at offset 8), each through on_frame(n, frame),
    n counting from the first frame, the handshake's included. on_frame
    returns the bytes to forward, or None to hold the frame back. An end
    of either side is passed on, as a path passes the peer's FIN."""

    HEADER = 24

    def __init__(self, upstream):
        self.upstream = upstream
        self.socks = []
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.addr = "127.0.0.1:%d" % self.lsock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def on_frame(self, n, frame):
        return frame

    def _serve(self):
        while True:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            s = socket.create_connection((host, int(port)))
            self.socks += [c, s]
            threading.Thread(target=self._pipe, args=(s, c, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(c, s, True), daemon=True).start()

    def _pipe(self, src, dst, client):
        buf, n = b"", 0
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if not client:
                    dst.sendall(b)
                    continue
                buf += b
                while len(buf) >= self.HEADER:
                    flen = self.HEADER + struct.unpack_from("<I", buf, 8)[0]
                    if len(buf) < flen:
                        break
                    f, buf = buf[:flen], buf[flen:]
                    out = self.on_frame(n, f)
                    n += 1
                    if out is not None:
                        dst.sendall(out)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.lsock.close()
        for x in self.socks:
            try:
                x.close()
            except OSError:
                pass
