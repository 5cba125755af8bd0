"""One job on several hosts, emulated by network namespaces: 2 PS shard hosts
and 4 node hosts on one bridge, each node's veth shaped by tc tbf at its
link rate both ways (its uplink, shared by its links to both shards), 2
trainers per node under torchrun, launched by tools/launch/esd-launch with
the [launch] section docs/deploy.md shows for namespaces, read from it:
- 100 iterations end with the tables of the single-process reference
  (rtol 1e-5) and every node's links carrying what it predicted;
- SIGINT to the launcher stops the job gracefully (every process exits 0)
  and the same command resumes it: bit-identical to the uninterrupted run;
- kill -9 of the launcher and every process it started, then the same
  command: it resumes from the last complete checkpoint, bit-identical;
- kill -9 of one shard of the two: the launcher starts it again with
  --restore, the nodes and the other shard go back to its checkpoint, and
  the job ends bit-identical;
- the PyTorch trainer (examples/pytorch/wdl.py) runs under torchrun
  the same way, 20 iterations;
- a node whose data.stream differs is refused, naming both digests, and
  the launcher exits 1 naming that node.

Needs root (namespaces, tc) and python3-torch: exits 77 otherwise.

usage: test_multihost.py BIN_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from e2e_util import Env, bridge_port, sh, shard_files

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "launch", "esd-launch"))
PY = "/usr/bin/python3"
RATES = [40000000, 40000000, 20000000, 20000000]
ITERS = 100


def doc_launch():
    """The [launch] block of docs/deploy.md's section on namespaces."""
    with open(os.path.join(HERE, "..", "..", "docs", "deploy.md")) as f:
        text = f.read()
    sec = text[text.index("## On one machine: hosts as network namespaces"):]
    lines, started = [], False
    for ln in sec.splitlines():
        if ln.strip() == "[launch]":
            started = True
        if started:
            if not ln.strip():
                break
            lines.append(ln.strip())
    return lines


DOC_LAUNCH = doc_launch()


class Hosts:
    """Namespaces <tag>ps0, <tag>ps1, <tag>n0..n3 joined by a bridge in
    <tag>sw; host i has 10.79.0.(i+1)."""

    def __init__(self):
        self.tag = "mh%d" % (os.getpid() % 10000)
        self.names = ["%sps%d" % (self.tag, s) for s in range(2)] + \
                     ["%sn%d" % (self.tag, w) for w in range(4)]
        self.sw = self.tag + "sw"
        self.made = []

    def addr(self, i):
        return "10.79.0.%d" % (i + 1)

    def dev(self, i):
        return "%sh%d" % (self.tag, i)

    def __enter__(self):
        try:
            for ns in [self.sw] + self.names:
                sh("ip", "netns", "add", ns)
                self.made.append(ns)
                sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.sw, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", self.sw, "link", "set", "br0", "up")
            for i, ns in enumerate(self.names):
                # a node: its uplink and downlink at its rate
                bridge_port(self.sw, ns, self.dev(i), "%ss%d" % (self.tag, i),
                            RATES[i - 2] if i >= 2 else 0)
                sh("ip", "-n", ns, "addr", "add", self.addr(i) + "/24", "dev", self.dev(i))
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


def write_files(env, hosts, work, name, node_sets=None, every=0):
    """The job (checkpoints every 'every' iterations, 0: at the end) and
    the hosts file of one deployment; their paths."""
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    job = os.path.join(d, "job.ini")
    s = env.settings(job__iterations=ITERS)
    with open(job, "w") as f:
        # the job key, as docs/deploy.md makes it (esdctl keygen), shared
        key = os.path.join(d, "job.key")
        if not os.path.exists(key):
            subprocess.run([os.path.join(env.bin, "esdctl"), "keygen", key], check=True,
                           stdout=subprocess.DEVNULL)
        f.write("[job]\nseed = %s\niterations = %d\nkey = %s\n" % (s["job.seed"], ITERS, key))
        f.write("[workers]\nn = 4\nbatch = 32\ntrainers = 2\n")
        f.write("rates = %s\n" % ",".join(str(r) for r in RATES))
        f.write("link_rates = 0,0,0,0\n")  # tc shapes the links, not the token buckets
        f.write("[model]\ndim = 8\nhidden = 8\noptimizer = adagrad\nlr = 0.05\n")
        f.write("[cache]\nratio = 0.08\n[dispatch]\nmethod = hybrid\nalpha = 0.25\n")
        f.write("[data]\nstream = %s\n" % env.stream)
        f.write("[ps]\nshards = 2\naddrs = %s:7000,%s:7000\ncheckpoint_dir = %s\n"
                "checkpoint_every = %d\n" % (hosts.addr(0), hosts.addr(1),
                                             os.path.join(d, "ckpt"), every))
    hf = os.path.join(d, "hosts.ini")
    with open(hf, "w") as f:
        # docs/deploy.md's [launch] for namespaces, as written there; only
        # its two paths are this machine's
        for line in DOC_LAUNCH:
            key = line.split("=", 1)[0].strip()
            if key == "bin":
                line = "bin = %s" % env.bin
            elif key == "workdir":
                line = "workdir = %s" % os.path.join(d, "run")
            f.write(line + "\n")
        f.write("master_port = %d\n" % (29600 + os.getpid() % 300))
        for sh_ in range(2):
            f.write("[shard%d]\nhost = %s\nlisten = 0.0.0.0:7000\n" % (sh_, hosts.names[sh_]))
        for w in range(4):
            f.write("[node%d]\nhost = %s\naddress = %s\n" % (w, hosts.names[2 + w],
                                                             hosts.addr(2 + w)))
            # the trainers' gloo on the host's own interface (its hostname
            # resolves to a loopback address no other host reaches)
            f.write("env = GLOO_SOCKET_IFNAME=%s\n" % hosts.dev(2 + w))
            if node_sets and w in node_sets:
                f.write("set = %s\n" % node_sets[w])
    os.makedirs(os.path.join(d, "ckpt"), exist_ok=True)
    os.makedirs(os.path.join(d, "run"), exist_ok=True)
    return d, job, hf, s


def launch(job, hf, log):
    return subprocess.Popen([PY, LAUNCH, "--job", job, "--hosts", hf], stdout=log,
                            stderr=subprocess.STDOUT, text=True)


def run_to_end(job, hf, d, tag, timeout=300):
    with open(os.path.join(d, tag + ".log"), "w") as log:
        p = launch(job, hf, log)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            p.send_signal(signal.SIGINT)
            rc = p.wait(timeout=60)
    with open(os.path.join(d, tag + ".log")) as f:
        return rc, f.read()


def summaries(d):
    import json
    out = []
    for w in range(4):
        with open(os.path.join(d, "run", "summary%d.json" % w)) as f:
            out.append(json.load(f))
    return out


def wait_iteration(d, it, limit_s=120):
    """Poll shard 0's status through its control socket."""
    from e2e_util import ctl
    got, t0 = 0, time.time()
    while got < it and time.time() - t0 < limit_s:
        try:
            got = ctl(os.path.join(d, "run", "ps0.sock"), "status")["iteration"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    return got


def descendants(pid):
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open("/proc/%s/stat" % e) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(e))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        q = todo.pop()
        for k in kids.get(q, []):
            out.append(k)
            todo.append(k)
    return out


def nodes_seen_by_shard0(env, d):
    """esdctl on shard 0's socket: every node's last report."""
    import json
    r = subprocess.run([os.path.join(env.bin, "esdctl"), "--socket",
                        os.path.join(d, "run", "ps0.sock"), "--json", "status"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    try:
        return json.loads(r.stdout).get("nodes", [])
    except ValueError:
        return []


def test_uninterrupted(env, hosts, work):
    d, job, hf, s = write_files(env, hosts, work, "base")
    t0 = time.time()
    with open(os.path.join(d, "launch.log"), "w") as log:
        p = launch(job, hf, log)
        wait_iteration(d, 1)
        nodes = []
        while p.poll() is None:  # a report a second from each node
            seen = nodes_seen_by_shard0(env, d)
            if seen:
                nodes = seen
            if len(nodes) == 4 and all(n.get("iteration", 0) > 0 and n.get("trainers") == 2
                                       for n in nodes):
                break
            time.sleep(0.2)
        rc = p.wait(timeout=300)
    with open(os.path.join(d, "launch.log")) as f:
        out = f.read()
    env.check(len(nodes) == 4 and all(n.get("iteration", 0) > 0 and n.get("trainers") == 2
                                      for n in nodes),
              "esdctl status on shard 0 lists every node of the job with its trainers: %s"
              % [(n.get("rank"), n.get("iteration"), n.get("trainers")) for n in nodes])
    env.check(rc == 0 and "every process exited 0" in out,
              "4 node hosts x 2 trainers, 2 shard hosts, %d iterations: the launcher exits 0 "
              "(%.1f s): %s" % (ITERS, time.time() - t0, out.strip().splitlines()[-1:]))
    env.check(all("[trainers%d]" % w in out for w in range(4)) and "[esd-ps1]" in out,
              "every process's lines are streamed with its name")
    sums = summaries(d)
    env.check_transfers("multihost", sums)
    ref = env.reference("multihost", s)
    ok, cmp_out = env.compare(shard_files(os.path.join(d, "ckpt"), 2), ref)
    env.check(ok, "final tables == single-process reference (rtol 1e-5): %s"
              % cmp_out.splitlines()[-1:])
    return shard_files(os.path.join(d, "ckpt"), 2)


def test_stop_and_resume(env, hosts, work, base):
    d, job, hf, _ = write_files(env, hosts, work, "stop")
    with open(os.path.join(d, "launch1.log"), "w") as log:
        p = launch(job, hf, log)
        got = wait_iteration(d, 20)
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=120)
        took = time.time() - t0
    with open(os.path.join(d, "launch1.log")) as f:
        out = f.read()
    stops = {sm["stopped_at"] for sm in summaries(d)}
    env.check(rc == 0 and len(stops) == 1 and got < min(stops) < ITERS,
              "SIGINT to the launcher at iteration %d: every process exits 0 within %.1f s, "
              "stopped after iteration %s" % (got, took, sorted(stops)))
    rc, out = run_to_end(job, hf, d, "launch2")
    env.check(rc == 0 and all(sm["iterations"] == ITERS for sm in summaries(d)),
              "the same command resumes the job and ends it: %s"
              % out.strip().splitlines()[-1:])
    ok, cmp_out = env.compare(shard_files(os.path.join(d, "ckpt"), 2), base, exact=True)
    env.check(ok, "stopped and resumed: bit-identical to the uninterrupted run: %s"
              % cmp_out.splitlines()[-1:])


def test_kill_all(env, hosts, work, base):
    d, job, hf, _ = write_files(env, hosts, work, "killall", every=10)
    with open(os.path.join(d, "launch1.log"), "w") as log:
        p = launch(job, hf, log)
        got = wait_iteration(d, 35)
        victims = descendants(p.pid)
        for pid in [p.pid] + victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()
    time.sleep(0.5)
    env.check(got >= 35, "kill -9 of the launcher and its %d processes at iteration %d"
              % (len(victims), got))
    rc, out = run_to_end(job, hf, d, "launch2")
    env.check(rc == 0 and "resumes after iteration" in out,
              "the same command resumes from the last complete checkpoint: %s"
              % [ln for ln in out.splitlines() if "resumes after" in ln][:1])
    ok, cmp_out = env.compare(shard_files(os.path.join(d, "ckpt"), 2), base, exact=True)
    env.check(ok, "after kill -9 of everything: bit-identical to the uninterrupted run: %s"
              % cmp_out.splitlines()[-1:])


def find_shard(launcher_pid, shard):
    """The pid of esd-ps --shard shard among the launcher's descendants."""
    for pid in descendants(launcher_pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"esd-ps") and b"--shard" in argv and \
                argv[argv.index(b"--shard") + 1] == str(shard).encode():
            return pid
    return None


def test_shard_killed(env, hosts, work, base):
    """kill -9 of shard 1 mid-run: the launcher starts it again from its
    checkpoint, the nodes and shard 0 go back to it, the job ends."""
    d, job, hf, _ = write_files(env, hosts, work, "shardkill", every=10)
    with open(os.path.join(d, "launch.log"), "w") as log:
        p = launch(job, hf, log)
        got = wait_iteration(d, 35)
        victim = find_shard(p.pid, 1)
        if victim:
            os.kill(victim, signal.SIGKILL)
        rc = p.wait(timeout=300)
    with open(os.path.join(d, "launch.log")) as f:
        out = f.read()
    env.check(victim is not None and rc == 0 and "starting it again" in out,
              "esd-ps1 killed at iteration %d: the launcher restarts it and the job ends: %s"
              % (got, [ln for ln in out.splitlines() if "again" in ln][:1]))
    back = [ln for ln in out.splitlines() if "[esd-ps0]" in ln and "back to checkpoint" in ln]
    env.check(len(back) == 1, "shard 0 went back to the restarted shard's checkpoint: %s"
              % back)
    ok, cmp_out = env.compare(shard_files(os.path.join(d, "ckpt"), 2), base, exact=True)
    env.check(ok, "after a shard's kill -9 and restart: bit-identical to the uninterrupted "
              "run: %s" % cmp_out.splitlines()[-1:])


def test_pytorch(env, hosts, work):
    """The PyTorch trainer (examples/pytorch/wdl.py) under torchrun: it
    finds its daemon from ESD_NODE_DIR and its rank, world and rendezvous
    from torchrun's variables (env://, no shared file)."""
    d, job, hf, _ = write_files(env, hosts, work, "pytorch")
    with open(hf) as f:
        text = f.read()
    train = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "pytorch", "wdl.py"))
    text = re.sub(r"(?m)^trainer = .*$", "trainer = %s %s" % (PY, train), text)
    with open(hf, "w") as f:
        f.write(text)
    with open(job) as f:
        jt = f.read()
    with open(job, "w") as f:
        f.write(jt.replace("iterations = %d" % ITERS, "iterations = 20"))
    rc, out = run_to_end(job, hf, d, "launch", timeout=400)
    done = [ln for ln in out.splitlines()
            if ln.startswith("[trainers0]") and "done: 20 iterations" in ln and "final loss" in ln]
    env.check(rc == 0 and done, "PyTorch trainers under torchrun (4 nodes x 2): the job ends, "
              "rank 0 reports: %s" % (done[:1] or out.strip().splitlines()[-3:]))
    if rc == 0:
        env.check_transfers("multihost-pytorch", summaries(d))


def test_other_stream(env, hosts, work):
    other = os.path.join(work, "other.esd")
    subprocess.run([os.path.join(env.bin, "esd-data"), "gen", "-o", other, "--shape",
                    "criteo-kaggle", "-n", "8000", "--scale", "1000", "--max-rows", "2000",
                    "--seed", "8"], check=True, stdout=subprocess.DEVNULL)
    d, job, hf, _ = write_files(env, hosts, work, "other", {3: "data.stream=" + other})
    rc, out = run_to_end(job, hf, d, "launch", timeout=120)
    digests = set(re.findall(r"\b([0-9a-f]{16})\b", out))
    env.check(rc == 1 and "failed: esdd3" in out and other in out and len(digests) >= 2,
              "a node with another stream is refused naming the file and both digests, and "
              "the launcher names it: %s" % [ln for ln in out.splitlines()
                                             if "failed:" in ln or "refused" in ln][:2])


def main():
    if os.geteuid() != 0:
        print("skip: network namespaces and tc need root")
        return 77
    for t in ("ip", "tc"):
        if not shutil.which(t):
            print("skip: the '%s' command (iproute2) is missing" % t)
            return 77
    if subprocess.run([PY, "-c", "import torch.distributed.run"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode:
        print("skip: torchrun (python3-torch) is missing")
        return 77
    env = Env(sys.argv[1], "multihost")
    env.gen_stream(samples=20000)
    try:
        hosts = Hosts().__enter__()
    except RuntimeError as e:
        print("skip: cannot make network namespaces here: %s" % e)
        return 77
    try:
        base = test_uninterrupted(env, hosts, env.root)
        test_stop_and_resume(env, hosts, env.root, base)
        test_kill_all(env, hosts, env.root, base)
        test_shard_killed(env, hosts, env.root, base)
        if os.environ.get("ESD_PYTORCH_SKIP"):
            print("not run: the PyTorch case (%s)" % os.environ["ESD_PYTORCH_SKIP"])
        else:
            test_pytorch(env, hosts, env.root)
        test_other_stream(env, hosts, env.root)
    finally:
        hosts.__exit__()
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
