"""A keyed shard before the job key handshake (real esd-ps, esdd and
trainer processes, real sockets): strangers without the key hold nothing
of it.
- 16 keyless connections send frames flagged RELIABLE, out of order, with
  large bodies, for 8 s: the shard's resident memory (VmRSS) grows by
  less than 8 MiB (a handshake's bytes a connection; before, each link's
  reliable layer buffered them, GBs in seconds);
- a keyless ERROR frame never reaches the shard's application: the peer
  is not answered "first frame must be HELLO", and its text is not
  logged;
- 32 threads from four other loopback addresses keep every "waiting for
  HELLO" place taken while the shard restarts (job.restart_shards): the
  daemons still get in and the job goes on to its end.

usage: test_preauth.py BIN_DIR
"""
import os
import signal
import socket
import struct
import sys
import threading
import time

from e2e_util import Env, ClusterError, ctl
from esdcluster import Cluster, make_key, write_ini

MAGIC, VERSION = 0x46445345, 3  # ESD_PROTO_VERSION
OP_PULL, OP_ERROR = 2, 8
FLAG_RELIABLE = 0x0001
ATTACKERS = 16
ATTACK_S = 8.0
RSS_GROWTH_MAX = 8 << 20
SQUATTERS = 32
SQUAT_SOURCES = ["127.0.0.%d" % i for i in range(2, 6)]


def frame(op, body, flags=0, seq=0):
    return struct.pack("<IBBHIIQ", MAGIC, VERSION, op, flags, len(body), 0, seq) + body


def rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    return 0


def start_shard_alone(env, work):
    """A keyed shard and no daemons: its memory is the attack's alone."""
    c = Cluster(env.bin, work, env.settings(job__iterations=100000, workers__n=2))
    c.settings["ps.shards"] = 1
    c.settings["job.key"] = make_key(os.path.join(work, "job.key"))
    write_ini(c.job, c.settings)
    c.ps_addr = [c.start_ps(0)]
    return c


def reliable_flood(addr, stop, sent):
    """Connect again and again; on each connection, RELIABLE frames with
    sequence numbers from 2 (1 never comes) and 1 MiB bodies."""
    host, port = addr.rsplit(":", 1)
    body = b"\xa5" * (1 << 20)
    while not stop.is_set():
        try:
            s = socket.create_connection((host, int(port)), timeout=2)
        except OSError:
            time.sleep(0.01)
            continue
        try:
            seq = 2
            while not stop.is_set():
                s.sendall(frame(OP_PULL, body, FLAG_RELIABLE, seq))
                sent[0] += len(body)
                seq += 1
        except OSError:
            pass
        finally:
            s.close()


def test_memory(env, work):
    c = start_shard_alone(env, work)
    try:
        pid = c.procs["ps0"].pid
        time.sleep(0.5)
        base = rss(pid)
        stop, sent, peak = threading.Event(), [0], base
        ts = [threading.Thread(target=reliable_flood, args=(c.ps_addr[0], stop, sent),
                               daemon=True) for _ in range(ATTACKERS)]
        for t in ts:
            t.start()
        t0 = time.time()
        while time.time() - t0 < ATTACK_S:
            peak = max(peak, rss(pid))
            if peak - base > 64 * RSS_GROWTH_MAX:
                break  # the shard is losing: no need to take the host's memory
            time.sleep(0.1)
        stop.set()
        for t in ts:
            t.join(5)
        alive = c.procs["ps0"].poll() is None
    finally:
        c.stop()
    print("keyed shard, %d keyless connections sending RELIABLE out-of-order frames for "
          "%.0f s (%.0f MiB written): VmRSS %.1f MiB -> peak %.1f MiB"
          % (ATTACKERS, time.time() - t0, sent[0] / 2**20, base / 2**20, peak / 2**20))
    env.check(alive and peak - base < RSS_GROWTH_MAX,
              "%d keyless connections: the shard's VmRSS grew by %.1f MiB (at most %d MiB)"
              % (ATTACKERS, (peak - base) / 2**20, RSS_GROWTH_MAX >> 20))


def test_error_frame(env, work):
    c = start_shard_alone(env, work)
    marker = "stranger-says-hello-%d" % os.getpid()
    text = marker.encode()
    try:
        host, port = c.ps_addr[0].rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=5)
        body = struct.pack("<iI", -5, len(text)) + text
        s.sendall(frame(OP_ERROR, body + b"\0" * (-len(body) % 4)))
        got = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        except socket.timeout:
            pass
        s.close()
        time.sleep(0.3)
    finally:
        c.stop()
    with open(os.path.join(work, "ps0.log")) as f:
        log = f.read()
    env.check(b"first frame must be HELLO" not in got,
              "a keyless ERROR frame does not reach the shard's application (answer %r)"
              % got[32:120])
    env.check(marker not in log, "the keyless ERROR's text is not in the shard's log")


def squat(stop, addr, source, counts):
    """Hold a connection from source until the shard ends it, then again."""
    host, port = addr.rsplit(":", 1)
    while not stop.is_set():
        s = socket.socket()
        try:
            s.bind((source, 0))
            s.settimeout(1.0)
            s.connect((host, int(port)))
            counts[0] += 1
            while not stop.is_set():
                try:
                    if not s.recv(4096):
                        break
                except socket.timeout:
                    continue
        except OSError:
            time.sleep(0.005)
        finally:
            s.close()


def test_squatting(env, s, work):
    with Cluster(env.bin, work, s, emulate_ns=20000, restart_shards=True) as c:
        c.start()
        sock = os.path.join(work, "ps0.sock")
        t0 = time.time()
        while ctl(sock, "status")["iteration"] < 20 and time.time() - t0 < 60:
            time.sleep(0.02)
        c.kill("ps0", signal.SIGKILL)
        time.sleep(0.3)
        c.start_ps(0, restore=True)
        stop, counts = threading.Event(), [0]
        ts = [threading.Thread(target=squat, daemon=True,
                               args=(stop, c.ps_addr[0], SQUAT_SOURCES[i % len(SQUAT_SOURCES)],
                                     counts)) for i in range(SQUATTERS)]
        for t in ts:
            t.start()
        try:
            c.wait(timeout=180)
            ok, err = True, ""
        except ClusterError as e:
            ok, err = False, str(e)
        stop.set()
        for t in ts:
            t.join(5)
        sums = c.summaries() if ok else []
    with open(os.path.join(work, "ps0.log")) as f:
        log = f.read()
    env.check(ok and sums and all(sm["iterations"] == s["job.iterations"] for sm in sums),
              "%d squatting threads (%d connections) while the shard restarts: the job ended "
              "(%s; %d eviction line(s))" % (SQUATTERS, counts[0], err or "ok",
                                             log.count("had not proved the job key")))


def main():
    env = Env(sys.argv[1], "preauth")
    env.gen_stream(samples=20000)
    s = env.settings(job__iterations=150)
    try:
        test_memory(env, os.path.join(env.root, "memory"))
        test_error_frame(env, os.path.join(env.root, "error"))
        s_ck = dict(s, **{"ps.checkpoint_dir": os.path.join(env.root, "ck"),
                          "ps.checkpoint_every": 10})
        os.makedirs(s_ck["ps.checkpoint_dir"])
        test_squatting(env, s_ck, os.path.join(env.root, "squat"))
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
