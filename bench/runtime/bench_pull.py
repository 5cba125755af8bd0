#!/usr/bin/env python3
"""The runtime's pull over DPDK memif against TCP loopback, side by side.

For each round, for tcp then dpdk (and each with and without the job key):
start one esd-ps shard of a one-worker job (512-float rows, SGD) on one
core, run bench_pull on another against it (batch pulls of 1024 rows for --seconds, then
--pings one-row pulls), stop the shard. Prints the medians over --rounds
and the ratios dpdk / tcp: rows per second (goal at least 1.5x) and the
one-row round trip (goal at most 0.5x).

The keyed case tags frames with the suite the link picks (NH-GMAC where
the CPU has AVX2 and VPCLMULQDQ). With --gcm, each round also runs it with
ESD_AUTH_SUITES=aes256-gcm (gmac.c's AES-256-GCM tags, the suite before
NH-GMAC). With --sodium, each round also runs the keyed case with
ESD_NO_VPCLMUL=1 in both processes (the frame tags by libsodium's
AES-256-GCM, as before the wide GMAC). All side by side, with the ratios
keyed / keyless per backend (goals: memif >= 0.8x, tcp >= 0.9x), taken
round by round: each backend's keyless and keyed runs follow each other.

--netns (root): the shard and the client in two network namespaces joined
by a veth pair (MTU 9000), dpdk over net_af_packet on it against tcp on
the same pair; --rate shapes both ends with tc tbf (e.g. 500M).

--fifo (root): both processes at real-time priority, so that on a shared
host the figures measure the link rather than the scheduler.

--baseline DIR: another build's bin directory run beside BIN_DIR, round by
round (the order of the two alternating), with its keyed / keyless ratios
and this build's rows/s over the baseline's per case.

--cpu: also the shard's link thread's CPU per batch answer, user and
system apart (from /proc, read while the client runs; the one-row pulls
are counted in too), and how often it slept per answer: what the key
adds on the thread that sets the pace, where the kernel's share goes.

usage: bench_pull.py BIN_DIR [--rounds N] [--seconds S] [--pings N] [--dim D] [--queue Q]
                     [--gcm] [--sodium] [--netns [--rate R]] [--fifo] [--cpu]
                     [--baseline DIR]
"""
import argparse
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time


class VethPair:
    """Two namespaces, the shard's (A, 10.214.0.1) and the client's (B),
    joined by a veth pair named esd0 on both sides; deleted on exit."""

    def __init__(self, rate):
        tag = "esdbp%d" % (os.getpid() % 100000)
        self.ns = [tag + "a", tag + "b"]
        self.rate = rate

    @staticmethod
    def _run(*argv):
        r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode:
            raise RuntimeError("--netns: '%s' failed: %s" % (" ".join(argv), r.stdout.strip()))

    def __enter__(self):
        try:
            for ns in self.ns:
                self._run("ip", "netns", "add", ns)
            self._run("ip", "link", "add", "esd0", "netns", self.ns[0], "mtu", "9000", "type",
                      "veth", "peer", "name", "esd0", "netns", self.ns[1], "mtu", "9000")
            for i, ns in enumerate(self.ns):
                self._run("ip", "-n", ns, "addr", "add", "10.214.0.%d/30" % (i + 1), "dev",
                          "esd0")
                self._run("ip", "-n", ns, "link", "set", "esd0", "up")
                self._run("ip", "-n", ns, "link", "set", "lo", "up")
                if self.rate:
                    self._run("tc", "-n", ns, "qdisc", "add", "dev", "esd0", "root", "tbf",
                              "rate", self.rate, "burst", "1mb", "latency", "1s")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        return False

    def wrap(self, side):
        return ["ip", "netns", "exec", self.ns[side]]


def write_job(path, stream, backend, addr, dim, key, queue=0, af_packet=False):
    with open(path, "w") as f:
        # the stream's whole vocabulary is planned for, but only the rows
        # pulled are ever touched (the tables are mapped lazily)
        f.write("[job]\niterations = 1000\nforce_plan = true\n")
        # the keyless baseline says so (a shard refuses to start without)
        f.write("key = %s\n" % key if key else "insecure = yes\n")
        f.write("[workers]\nn = 1\nbatch = 1024\n[model]\ndim = %d\noptimizer = sgd\n"
                "[data]\nstream = %s\n[ps]\nbackend = %s\naddrs = %s\n"
                % (dim, stream, backend, addr))
        if queue and backend == "dpdk":
            f.write("dpdk_queue = %d\n" % queue)
        if af_packet and backend == "dpdk":
            f.write("dpdk_port = af_packet:esd0\ndpdk_mtu = 8192\n")


FIFO = []


def pin(i):
    """taskset prefix: the shard and the client each on a core of its own
    (as a kernel-bypass deployment gives its polling threads), the same
    for both backends; nothing on a single-core host. With --fifo, chrt
    first: both at SCHED_FIFO priority 10."""
    n = os.cpu_count() or 1
    return FIFO + (["taskset", "-c", str(n - 1 - i)] if n > 1 and shutil.which("taskset")
                   else [])


class LinkCpu:
    """The shard's link thread's user and system CPU seconds and voluntary
    context switches, read every 20 ms from /proc while the client runs (the
    thread ends with the link, so the last reading is kept)."""

    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pid):
        self.pid, self.last, self.done = pid, None, threading.Event()
        self.th = threading.Thread(target=self._watch, daemon=True)
        self.th.start()

    def _read(self):
        for t in os.listdir("/proc/%d/task" % self.pid):
            try:
                with open("/proc/%d/task/%s/stat" % (self.pid, t)) as f:
                    stat = f.read()
                with open("/proc/%d/task/%s/status" % (self.pid, t)) as f:
                    status = f.read()
            except OSError:
                continue
            if stat[stat.index("(") + 1:stat.rindex(")")] != "esd-ps-link":
                continue
            f = stat[stat.rindex(")") + 2:].split()
            vcs = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
            return int(f[11]) / self.TICK, int(f[12]) / self.TICK, vcs
        return None

    def _watch(self):
        while not self.done.wait(0.02):
            try:
                r = self._read()
            except OSError:
                return
            if r:
                self.last = r

    def stop(self):
        self.done.set()
        self.th.join()
        return self.last


def one_run(bin_dir, work, stream, backend, keyed, args):
    """keyed: False, True, "gcm" (keyed, AES-256-GCM tags) or "sodium"
    (keyed, libsodium's tags)."""
    env = dict(os.environ)
    if keyed == "sodium":
        env["ESD_NO_VPCLMUL"] = "1"
    if keyed == "gcm":
        env["ESD_AUTH_SUITES"] = "aes256-gcm"
    key = os.path.join(work, "job.key") if keyed else ""
    if keyed and not os.path.exists(key):
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (secrets.token_hex(32) + "\n").encode())
        os.close(fd)
    net = args.net
    if net:
        listen = "10.214.0.1:0" if backend == "tcp" else "esd0"
    else:
        listen = "127.0.0.1:0" if backend == "tcp" else os.path.join(work, "memif.sock")
    job = os.path.join(work, "job-%s.ini" % backend)
    write_job(job, stream, backend, listen, args.dim, key, args.queue, bool(net))
    argv = (net.wrap(0) if net else []) + pin(1) + [
        os.path.join(bin_dir, "esd-ps"), "--config", job, "--listen", listen]
    ps = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                          env=env)
    try:
        m = re.search(r"listening on (\S+) (\S+)", ps.stdout.readline())
        if not m:
            raise RuntimeError("esd-ps (%s) did not start" % backend)
        write_job(job, stream, backend, m.group(2), args.dim, key, args.queue, bool(net))
        cpu = LinkCpu(ps.pid) if args.cpu else None
        argv = (net.wrap(1) if net else []) + pin(0) + [
            os.path.join(bin_dir, "bench_pull"), "--config", job, "--addr",
                         m.group(2), "--rows", "1024", "--seconds", str(args.seconds),
                         "--pings", str(args.pings)]
        out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=120, env=env)
        if out.returncode:
            raise RuntimeError("bench_pull (%s): %s" % (backend, out.stderr.strip()[-2000:]))
        res = {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", out.stdout)
               if k not in ("backend",)}
        used = cpu.stop() if cpu else None
        if used:
            answers = res["rows_per_s"] * args.seconds / 1024
            res["link_user_us"] = used[0] * 1e6 / answers
            res["link_sys_us"] = used[1] * 1e6 / answers
            res["link_sleeps"] = used[2] / answers
        return res
    finally:
        ps.kill()
        ps.wait()


def paired(res, backend, keyed):
    """keyed / keyless rows per second round by round (the two ran back to
    back, so a shared host's drift hits both): median [min-max]."""
    r = sorted(k["rows_per_s"] / n["rows_per_s"]
               for k, n in zip(res[(backend, keyed)], res[(backend, False)]))
    return "%.2fx [%.2f-%.2f]" % (statistics.median(r), r[0], r[-1])


def print_baseline(res, base, keyings):
    """The baseline build's keyed / keyless ratios, and this build's rows/s
    over the baseline's, round by round, per case."""
    for backend in ("tcp", "dpdk"):
        print("baseline: %s keyed / keyless rows/s: %s" % (backend, ", ".join(
            "%s %s" % (KEYING_NAME[k], paired(base, backend, k)) for k in keyings[1:])))
    for backend in ("tcp", "dpdk"):
        cases = []
        for k in keyings:
            r = sorted(a["rows_per_s"] / b["rows_per_s"]
                       for a, b in zip(res[(backend, k)], base[(backend, k)]))
            cases.append("key %s %.2fx [%.2f-%.2f]" % (KEYING_NAME[k], statistics.median(r),
                                                       r[0], r[-1]))
        print("this / baseline rows/s, %s: %s" % (backend, ", ".join(cases)))


KEYINGS = [False, True, "gcm", "sodium"]
KEYING_NAME = {False: "no", True: "yes", "gcm": "yes (AES-256-GCM tags)",
               "sodium": "yes (libsodium tags)"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--queue", type=int, default=0,
                    help="dpdk: ps.dpdk_queue (0: the job's default)")
    ap.add_argument("--gcm", action="store_true",
                    help="also the keyed case with AES-256-GCM tags (ESD_AUTH_SUITES=aes256-gcm)")
    ap.add_argument("--sodium", action="store_true",
                    help="also the keyed case with libsodium's tags (ESD_NO_VPCLMUL=1)")
    ap.add_argument("--netns", action="store_true",
                    help="af_packet against tcp on a veth pair between two namespaces (root)")
    ap.add_argument("--rate", default="",
                    help="--netns: tc tbf rate on both ends of the pair (e.g. 500M)")
    ap.add_argument("--fifo", action="store_true",
                    help="run the shard and the client at SCHED_FIFO priority 10 (root): "
                         "on a shared host the other work no longer takes their cores "
                         "(the kernel still leaves it 5 %% of each second)")
    ap.add_argument("--baseline", default="",
                    help="another build's bin directory, run beside BIN_DIR round by round")
    ap.add_argument("--cpu", action="store_true",
                    help="also the shard's link thread's CPU per batch answer (/proc)")
    args = ap.parse_args()
    if args.fifo:
        if not shutil.which("chrt"):
            ap.error("--fifo: no chrt on PATH")
        FIFO[:] = ["chrt", "-f", "10"]
    if args.rate and not args.netns:
        ap.error("--rate: only with --netns")
    work = tempfile.mkdtemp(prefix="esd-bench-pull-")
    args.net = None
    try:
        if args.netns:
            args.net = VethPair(args.rate.replace("M", "mbit").replace("G", "gbit")).__enter__()
        stream = os.path.join(work, "stream.esd")
        subprocess.run([os.path.join(args.bin, "esd-data"), "gen", "-o", stream, "--shape",
                        "criteo-kaggle", "-n", "4096"], check=True, stdout=subprocess.DEVNULL)
        res = {}
        keyings = [k for k in KEYINGS if k in (False, True) or (k == "gcm" and args.gcm)
                   or (k == "sodium" and args.sodium)]
        base = {}
        builds = [(args.bin, res)] + ([(args.baseline, base)] if args.baseline else [])
        for r in range(args.rounds):  # backends alternate: noise hits them alike
            for bin_dir, store in builds if r % 2 == 0 else builds[::-1]:
                for backend in ("tcp", "dpdk"):  # a backend's keyings run back to back
                    for keyed in keyings:
                        store.setdefault((backend, keyed), []).append(
                            one_run(bin_dir, work, stream, backend, keyed, args))
        med = {k: {f: statistics.median(x[f] for x in v if f in x) for f in set().union(*v)}
               for k, v in res.items()}
        print("# %d rounds, %d-row batches of %d-float rows (SGD), %.1f s each; %d one-row "
              "pulls; medians; %s%s" % (args.rounds, 1024, args.dim, args.seconds, args.pings,
                                      "SCHED_FIFO; " if args.fifo else "",
                                      "dpdk af_packet and tcp on a veth pair%s" % (
                                          ", tbf " + args.rate if args.rate else "")
                                      if args.netns else "dpdk memif, tcp loopback"))
        print("| backend | job key | rows/s | batch ms | 1-row RTT p50 us | p99 us | "
              "retransmissions |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for (backend, keyed), m in sorted(med.items(),
                                          key=lambda kv: (KEYINGS.index(kv[0][1]), kv[0][0])):
            print("| %s | %s | %.0f | %.3f | %.1f | %.1f | %.0f |"
                  % (backend, KEYING_NAME[keyed], m["rows_per_s"], m["batch_ms"],
                     m["rtt_us_p50"], m["rtt_us_p99"], m.get("retx", 0)))
        if args.cpu:
            print("| backend | job key | link thread user us / answer | system us | sleeps "
                  "/ answer |")
            print("|---|---|---:|---:|---:|")
            for (backend, keyed), m in sorted(
                    med.items(), key=lambda kv: (KEYINGS.index(kv[0][1]), kv[0][0])):
                if "link_user_us" in m:
                    print("| %s | %s | %.0f | %.0f | %.1f |"
                          % (backend, KEYING_NAME[keyed], m["link_user_us"],
                             m["link_sys_us"], m["link_sleeps"]))
        for keyed in (False, True):
            t, d = med[("tcp", keyed)], med[("dpdk", keyed)]
            goals = (" (goal >= 1.5)", " (goal <= 0.5)") if not args.netns else ("", "")
            print("dpdk / tcp (%s key): rows/s %.2fx%s, one-row RTT %.2fx%s"
                  % ("with" if keyed else "no", d["rows_per_s"] / t["rows_per_s"], goals[0],
                     d["rtt_us_p50"] / t["rtt_us_p50"], goals[1]))
        for backend, goal in (("tcp", 0.9), ("dpdk", 0.8)):
            print("%s keyed / keyless rows/s, median of the rounds' ratios [min-max]: %s "
                  "(goal >= %.1f)" % (backend, ", ".join(
                      "%s %s" % (KEYING_NAME[k], paired(res, backend, k))
                      for k in keyings[1:]), goal))
        if base:
            print_baseline(res, base, keyings)
    finally:
        if args.net:
            args.net.__exit__()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
