"""A shard under hostile or broken clients (real esd-ps, esdd and trainer
processes, real sockets):
- garbage, a header with an absurd length, a HELLO cut short: each gets an
  ERROR frame naming what is wrong, then the close (the cut HELLO, its
  sender silent after it, at the peer timeout, 3 s);
- a client without the job key gets "authentication failed" and nothing
  else; in a job without a key (job.insecure), a HELLO of another job is
  refused with "refused: not this job" and nothing else;
- one bit of one frame altered on the path of a daemon's link (a relay
  in this process) fails the job loudly: every process exits non-zero,
  the shard naming the worker and the failed tag;
- 200 idle connections held open neither stop a running job nor keep a
  daemon out that must reconnect (the shard restarted meanwhile);
- a shard with 64 file descriptors, held by 80 idle connections, goes on:
  accept errors are survived.

usage: test_hostile.py BIN_DIR
"""
import os
import signal
import socket
import struct
import subprocess
import sys
import time

from e2e_util import Env, ClusterError, FrameRelay, ctl, exit_codes
from esdcluster import Cluster

MAGIC, VERSION = 0x46445345, 3  # ESD_PROTO_VERSION


def frame(op, body, flags=0):
    return struct.pack("<IBBHIIQ", MAGIC, VERSION, op, flags, len(body), 0, 0) + body


def answer(addr, data, wait=8.0):
    """Send data on a new connection; (seconds until the close or None,
    the ERROR text the shard sent or "")."""
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    s.settimeout(wait)
    if data:
        s.sendall(data)
    t0, got = time.time(), b""
    try:
        while True:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except socket.timeout:
        return None, ""
    finally:
        s.close()
    text = ""
    if len(got) >= 32 and got[5] == 8:  # ERROR: code, text length, text
        n = struct.unpack_from("<I", got, 28)[0]
        text = got[32:32 + n].decode(errors="replace")
    return time.time() - t0, text


def idle_connections(addr, n):
    host, port = addr.rsplit(":", 1)
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection((host, int(port)), timeout=2))
        except OSError:
            break
    return out


def hello_of_another_job(env):
    import json
    st = json.loads(subprocess.run([os.path.join(env.bin, "esd-data"), "stat", "--json",
                                    env.stream], stdout=subprocess.PIPE, text=True,
                                   check=True).stdout)
    # the right data, a wrong token
    hello = struct.pack("<IIQIIIIQ", VERSION, 0, 0x1234, 0, 8, 8, 4, int(st["digest"], 16))
    return frame(1, hello)


def test_bad_frames(env, addr):
    took, text = answer(addr, b"this is not a frame at all\n" * 4)
    env.check(took is not None and took < 1 and "magic" in text,
              "garbage: ERROR naming the bad magic, then the close (%s s): %r" % (took, text))
    took, text = answer(addr, struct.pack("<IBBHIIQ", MAGIC, VERSION, 2, 0, 0xFFFFFFFC, 0, 0))
    env.check(took is not None and took < 1 and "length" in text,
              "header with length 0xFFFFFFFC: ERROR and close (%s s): %r" % (took, text))
    cut = struct.pack("<IBBHIIQ", MAGIC, VERSION, 1, 0, 40, 0, 0) + b"\x02\0\0\0" + b"\0" * 10
    took, text = answer(addr, cut)
    env.check(took is not None and 2 < took < 5 and "heard nothing" in text,
              "a HELLO cut short, then silence: ERROR and close at the peer timeout "
              "(job.peer_timeout_ms, 3 s) (%s s): %r" % (took, text))
    took, text = answer(addr, hello_of_another_job(env))
    env.check(took is not None and text == "authentication failed",
              "a client without the job key is refused, told nothing more: %r" % text)


def test_keyless_job(env, work):
    """A job without a key (job.insecure, a warning at start): a HELLO of
    another job is refused without the shard's token or anything else."""
    with Cluster(env.bin, work, env.settings(job__iterations=100000, workers__n=2,
                                             **{"job.insecure": "yes"})) as c:
        c.start()
        took, text = answer(c.ps_addr[0], hello_of_another_job(env))
    env.check(took is not None and text == "refused: not this job",
              "keyless job: a HELLO of another job is refused, told nothing of the job: %r"
              % text)
    with open(os.path.join(work, "ps0.log")) as f:
        env.check("INSECURE" in f.read(), "keyless job: the shard warns that anyone may join")


class Relay(FrameRelay):
    """An attacker on the path of one daemon's link: flips one bit of the
    body of the daemon's frame number 'at'."""

    def __init__(self, upstream, at):
        self.at, self.altered = at, False
        super().__init__(upstream)

    def on_frame(self, n, frame):
        if n == self.at and len(frame) > self.HEADER + 16:
            frame = bytearray(frame)
            frame[self.HEADER] ^= 0x01
            self.altered = True
        return bytes(frame)


def test_on_path(env, s, work):
    """One bit of one frame of worker 1's link altered on the path, in the
    middle of a job: the shard refuses it, and every process ends non-zero
    within 2 s, the shard naming the worker and the failed tag."""
    relays = []

    def via_relay(rank, ps_addrs):
        if rank != 1:
            return ",".join(ps_addrs)
        relays.append(Relay(ps_addrs[0], at=300))
        return relays[-1].addr

    with Cluster(env.bin, work, dict(s, **{"job.iterations": 100000}), emulate_ns=20000,
                 daemon_ps=via_relay) as c:
        c.start()
        t0 = time.time()
        while not relays[0].altered and time.time() - t0 < 60:
            time.sleep(0.01)
        t_alter = time.time()
        rcs = exit_codes(c.procs)
        took = time.time() - t_alter
    relays[0].close()
    with open(os.path.join(work, "ps0.log")) as f:
        ps_log = f.read()
    env.check(relays[0].altered and all(rc not in (0, "still running") for rc in rcs.values())
              and took < 2.5,
              "a frame altered on the path: every process exits non-zero %.1f s later: %s"
              % (took, rcs))
    env.check("failed authentication" in ps_log and "worker 1" in ps_log,
              "the shard names the worker and the failed tag: %s"
              % [ln for ln in ps_log.splitlines() if "authentication" in ln][:1])


def test_idle_flood(env, s, work):
    """200 idle connections while a job runs, and while its daemons
    reconnect to a restarted shard."""
    with Cluster(env.bin, work, s, emulate_ns=20000, restart_shards=True) as c:
        c.start()
        sock = os.path.join(work, "ps0.sock")
        addr = c.ps_addr[0]
        t0 = time.time()
        while ctl(sock, "status")["iteration"] < 20 and time.time() - t0 < 60:
            time.sleep(0.02)
        held = idle_connections(addr, 200)
        c.kill("ps0", signal.SIGKILL)
        time.sleep(0.3)
        for h in held:
            h.close()
        c.start_ps(0, restore=True)
        held = idle_connections(addr, 200)  # while the daemons reconnect
        try:
            c.wait(timeout=180)
            ok, err = True, ""
        except ClusterError as e:
            ok, err = False, str(e)
        for h in held:
            h.close()
        sums = c.summaries()
    env.check(ok and len(held) == 200 and all(sm["iterations"] == s["job.iterations"]
                                              for sm in sums),
              "200 idle connections: the daemons reconnected to the restarted shard and the "
              "job ended (%d held) %s" % (len(held), err))


def test_fd_limit(env, s, work):
    s = dict(s)
    with Cluster(env.bin, work, s, emulate_ns=20000,
                 wrap=lambda name: ["prlimit", "--nofile=64:64"] if name == "ps0" else []) as c:
        c.start()
        held = idle_connections(c.ps_addr[0], 80)
        try:
            c.wait(timeout=180)
            ok, err = True, ""
        except ClusterError as e:
            ok, err = False, str(e)
        for h in held:
            h.close()
    with open(os.path.join(work, "ps0.log")) as f:
        log = f.read()
    env.check(ok, "64 descriptors, 80 idle connections: the shard goes on, the job ends (%s; "
              "%d accept error line(s))" % (err or "ok", log.count("accept:")))


def main():
    env = Env(sys.argv[1], "hostile")
    env.gen_stream(samples=20000)
    s = env.settings(job__iterations=150)
    try:
        work = os.path.join(env.root, "frames")
        with Cluster(env.bin, work, env.settings(job__iterations=100000, workers__n=2)) as c:
            c.start()
            test_bad_frames(env, c.ps_addr[0])
        test_keyless_job(env, os.path.join(env.root, "keyless"))
        test_on_path(env, s, os.path.join(env.root, "onpath"))
        s_ck = dict(s, **{"ps.checkpoint_dir": os.path.join(env.root, "ck"),
                          "ps.checkpoint_every": 10})
        os.makedirs(s_ck["ps.checkpoint_dir"])
        test_idle_flood(env, s_ck, os.path.join(env.root, "flood"))
        test_fd_limit(env, s, os.path.join(env.root, "fdlimit"))
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
