"""docs/deploy.md run as written, its hosts emulated by network namespaces:
ps-a, edge-1 and edge-2 on one bridge with the doc's addresses
(10.0.0.10..12), each edge host's veth shaped by tc tbf at its workers.rates
value both ways, launched by tools/launch/esd-launch. The job file and the
hosts file are the doc's own code blocks as written; the hosts file's
[launch] is the one the doc shows for namespaces, the paths (/etc/esd,
/data, /var/lib/esd, /opt/esd) are this test's folders and the stream
comes from the doc's esd-data command with smaller tables (--scale). The
only changes to the job are --set: fewer iterations, and
workers.link_rates = 0,0 as the doc's namespace section says (tc shapes
the links):
- the job ends, and its tables pass the doc's own esd-ref check (the
  doc's esd-ref and compare commands, same optimizer, batch and stream);
- with the sizes pinned as the doc says for bit-identical reruns
  (workers.batch = 128,128): SIGINT to the launcher stops the job
  gracefully (every process exits 0) and the same command resumes it,
  bit-identical to the uninterrupted run; kill -9 of the launcher and
  every process, then the same command: bit-identical; kill -9 of one
  shard: the launcher starts it again with --restore, bit-identical;
- the PyTorch trainer (examples/pytorch/wdl.py) runs under torchrun
  the same way, 20 iterations;
- a node whose data.stream differs is refused, naming both digests, and
  the launcher exits 1 naming that node.

With ESD_SANITIZED=1 (the sanitizer build) only the first and the last:
the stops, kills and restarts are the launcher's Python over C paths
test_stop_resume and test_ps_restart run there, the PyTorch trainer's C
side is test_pytorch_models'.

Needs root (namespaces, tc) and python3-torch: exits 77 otherwise.

usage: test_multihost.py BIN_DIR
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

from e2e_util import Env, NetnsBridge, shard_files

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "launch", "esd-launch"))
PY = "/usr/bin/python3"
ITERS = 100
DOC = os.path.join(HERE, "..", "..", "docs", "deploy.md")
HOSTS = ["ps-a", "edge-1", "edge-2"]
ADDRS = ["10.0.0.10", "10.0.0.11", "10.0.0.12"]
# the sizes pinned, as docs/deploy.md says for bit-identical reruns
PINNED = ["workers.batch=128,128"]
SANITIZED = os.environ.get("ESD_SANITIZED") == "1"  # the sanitizer build


def doc_text():
    with open(DOC) as f:
        return f.read()


def doc_block(after, first=None):
    """The indented code block that follows the line containing 'after'
    (from its line starting with 'first', if given), dedented."""
    text = doc_text()
    sec = text[text.index(after):]
    lines, started = [], first is None
    for ln in sec.splitlines()[1:]:
        if not started:
            started = ln.strip() == first.strip()
            if not started:
                continue
        if lines and not ln.startswith("    ") and ln.strip():
            break
        if ln.startswith("    ") or (lines and not ln.strip()):
            lines.append(ln[4:])
        elif lines:
            break
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def doc_launch():
    """The [launch] block of docs/deploy.md's section on namespaces."""
    return doc_block("## On one machine: hosts as network namespaces", "    [launch]")


def doc_job():
    return doc_block("The job, `/etc/esd/job.ini`", "    [job]")


def doc_hosts():
    return doc_block("`/etc/esd/hosts.ini` on the machine you launch from", "    [launch]")


def doc_esd_ref():
    """The doc's esd-ref and esd-ref compare commands (argv lists)."""
    lines = doc_block("## 5. Check a finished job against the reference")
    cmds, cur = [], ""
    for ln in lines:
        cur += ln.strip().rstrip("\\") + " "
        if not ln.rstrip().endswith("\\"):
            cmds.append(shlex.split(cur))
            cur = ""
    return cmds


def doc_gen():
    """The doc's esd-data gen command (argv)."""
    for ln in doc_block("## 2. Put the data and the job on every machine"):
        if "esd-data gen" in ln:
            return shlex.split(ln.strip())
    raise RuntimeError("docs/deploy.md shows no esd-data gen command")


class Paths:
    """The doc's absolute folders, as this test's."""

    def __init__(self, env, root):
        self.map = {"/opt/esd/build/bin": env.bin, "/etc/esd": os.path.join(root, "etc"),
                    "/data": os.path.join(root, "data"),
                    "/var/lib/esd": os.path.join(root, "var"),
                    "/tmp/esd-run": os.path.join(root, "var", "run")}
        for d in self.map.values():
            os.makedirs(d, exist_ok=True)

    def __call__(self, text):
        for a, b in self.map.items():
            text = re.sub(r"(?<![\w/])%s(?=/|\b|$)" % re.escape(a), b, text)
        return text


class Hosts(NetnsBridge):
    """Namespaces <tag>ps-a, <tag>edge-1, <tag>edge-2 on a bridge, with the
    doc's addresses; an edge host's veth shaped at its node's rate."""

    def __init__(self, rates):
        super().__init__("mh%d" % (os.getpid() % 10000),
                         [(h, ADDRS[i], rates[i - 1] if i >= 1 else 0)
                          for i, h in enumerate(HOSTS)])

    def dev(self, i):
        return self.DEV


def doc_rates():
    for ln in doc_job():
        if ln.split("=")[0].strip() == "rates":
            return [int(float(r.strip().rstrip("G")) * 1e9) for r in ln.split("=")[1].split(",")]
    raise RuntimeError("docs/deploy.md's job has no workers.rates")


def write_files(env, hosts, work, name, node_sets=None, sets=()):
    """The doc's job and hosts files for one deployment (its folders this
    test's, under work/name) and the launcher's --set list: (dir, job,
    hosts, sets)."""
    d = os.path.join(work, name)
    paths = Paths(env, d)
    os.makedirs(os.path.join(paths.map["/var/lib/esd"], "ckpt"), exist_ok=True)
    os.makedirs(os.path.join(paths.map["/var/lib/esd"], "run"), exist_ok=True)
    shutil.copy(env.stream, os.path.join(paths.map["/data"], "criteo.esd"))
    # the job key, as the doc makes it (esdctl keygen)
    subprocess.run([os.path.join(env.bin, "esdctl"), "keygen",
                    os.path.join(paths.map["/etc/esd"], "job.key")], check=True,
                   stdout=subprocess.DEVNULL)
    job = os.path.join(paths.map["/etc/esd"], "job.ini")
    with open(job, "w") as f:
        f.write(paths("\n".join(doc_job())) + "\n")
    hf = os.path.join(paths.map["/etc/esd"], "hosts.ini")
    text = "\n".join(doc_hosts())
    # the [launch] of the doc's namespace section replaces the ssh one
    text = text[text.index("[shard0]"):]
    for h, ns in zip(HOSTS, hosts.names):
        text = re.sub(r"(?m)^host = %s$" % re.escape(h), "host = " + ns, text)
    out = []
    for ln in text.splitlines():
        out.append(ln)
        m = re.match(r"\[node(\d+)\]", ln)
        if m:
            w = int(m.group(1))
            # the trainers' gloo on the host's own interface (its hostname
            # resolves to a loopback address), as the doc says
            out.append("env = GLOO_SOCKET_IFNAME=%s" % hosts.dev(1 + w))
            if node_sets and w in node_sets:
                out.append("set = %s" % node_sets[w])
    with open(hf, "w") as f:
        f.write(paths("\n".join(doc_launch())) + "\n")
        f.write("\n".join(out) + "\n")
    sets = ["job.iterations=%d" % ITERS, "workers.link_rates=0,0"] + list(sets)
    return d, job, hf, sets


def launch(job, hf, sets, log):
    argv = [PY, LAUNCH, "--job", job, "--hosts", hf]
    for kv in sets:
        argv += ["--set", kv]
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, text=True)


def run_to_end(job, hf, sets, d, tag, timeout=300):
    with open(os.path.join(d, tag + ".log"), "w") as log:
        p = launch(job, hf, sets, log)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            p.send_signal(signal.SIGINT)
            rc = p.wait(timeout=60)
    with open(os.path.join(d, tag + ".log")) as f:
        return rc, f.read()


def run_dir(d):
    return os.path.join(d, "var", "run")


def ckpt_dir(d):
    return os.path.join(d, "var", "ckpt")


def summaries(d, n=2):
    import json
    out = []
    for w in range(n):
        with open(os.path.join(run_dir(d), "summary%d.json" % w)) as f:
            out.append(json.load(f))
    return out


def wait_iteration(d, it, limit_s=120):
    """Poll shard 0's status through its control socket."""
    from e2e_util import ctl
    got, t0 = 0, time.time()
    while got < it and time.time() - t0 < limit_s:
        try:
            got = ctl(os.path.join(run_dir(d), "ps0.sock"), "status")["iteration"]
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
                        os.path.join(run_dir(d), "ps0.sock"), "--json", "status"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    try:
        return json.loads(r.stdout).get("nodes", [])
    except ValueError:
        return []


def doc_reference_check(env, d):
    """docs/deploy.md's esd-ref and esd-ref compare commands, their paths
    this run's and --iters the job's: (ok, compare's output)."""
    paths = Paths(env, d)
    ref_cmd, cmp_cmd = doc_esd_ref()
    ref_cmd = [paths(a) for a in ref_cmd]
    ref_cmd[ref_cmd.index("--iters") + 1] = str(ITERS)
    subprocess.run(ref_cmd, check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([paths(a) for a in cmp_cmd], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout.strip()


def test_as_written(env, hosts, work):
    d, job, hf, sets = write_files(env, hosts, work, "doc")
    t0 = time.time()
    with open(os.path.join(d, "launch.log"), "w") as log:
        p = launch(job, hf, sets, log)
        wait_iteration(d, 1)
        nodes = []
        while p.poll() is None:  # a report a second from each node
            seen = nodes_seen_by_shard0(env, d)
            if seen:
                nodes = seen
            if len(nodes) == 2 and all(n.get("iteration", 0) > 0 and n.get("trainers") == 2
                                       for n in nodes):
                break
            time.sleep(0.2)
        rc = p.wait(timeout=300)
    with open(os.path.join(d, "launch.log")) as f:
        out = f.read()
    env.check(len(nodes) == 2 and all(n.get("iteration", 0) > 0 and n.get("trainers") == 2
                                      for n in nodes),
              "esdctl status on shard 0 lists every node of the job with its trainers: %s"
              % [(n.get("rank"), n.get("iteration"), n.get("trainers")) for n in nodes])
    env.check(rc == 0 and "every process exited 0" in out,
              "docs/deploy.md's job and hosts files (2 edge hosts x 2 trainers, 2 shards on "
              "ps-a), %d iterations: the launcher exits 0 (%.1f s): %s"
              % (ITERS, time.time() - t0, out.strip().splitlines()[-1:]))
    env.check(all("[trainers%d]" % w in out for w in range(2)) and "[esd-ps1]" in out,
              "every process's lines are streamed with its name")
    if rc != 0:
        return
    env.check_transfers("multihost", summaries(d))
    ok, cmp_out = doc_reference_check(env, d)
    env.check(ok, "the doc's esd-ref check of the finished job passes: %s"
              % cmp_out.splitlines()[-1:])


def test_pinned(env, hosts, work):
    d, job, hf, sets = write_files(env, hosts, work, "pinned", sets=PINNED)
    rc, out = run_to_end(job, hf, sets, d, "launch")
    env.check(rc == 0, "the doc's job with its sizes pinned (%s) ends: %s"
              % (PINNED, out.strip().splitlines()[-1:]))
    return shard_files(ckpt_dir(d), 2)


def test_stop_and_resume(env, hosts, work, base):
    d, job, hf, sets = write_files(env, hosts, work, "stop", sets=PINNED)
    with open(os.path.join(d, "launch1.log"), "w") as log:
        p = launch(job, hf, sets, log)
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
    rc, out = run_to_end(job, hf, sets, d, "launch2")
    env.check(rc == 0 and all(sm["iterations"] == ITERS for sm in summaries(d)),
              "the same command resumes the job and ends it: %s"
              % out.strip().splitlines()[-1:])
    ok, cmp_out = env.compare(shard_files(ckpt_dir(d), 2), base, exact=True)
    env.check(ok, "stopped and resumed: bit-identical to the uninterrupted run: %s"
              % cmp_out.splitlines()[-1:])


def test_kill_all(env, hosts, work, base):
    d, job, hf, sets = write_files(env, hosts, work, "killall",
                                   sets=PINNED + ["ps.checkpoint_every=10"])
    with open(os.path.join(d, "launch1.log"), "w") as log:
        p = launch(job, hf, sets, log)
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
    rc, out = run_to_end(job, hf, sets, d, "launch2")
    env.check(rc == 0 and "resumes after iteration" in out,
              "the same command resumes from the last complete checkpoint: %s"
              % [ln for ln in out.splitlines() if "resumes after" in ln][:1])
    ok, cmp_out = env.compare(shard_files(ckpt_dir(d), 2), base, exact=True)
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
    d, job, hf, sets = write_files(env, hosts, work, "shardkill",
                                   sets=PINNED + ["ps.checkpoint_every=10"])
    with open(os.path.join(d, "launch.log"), "w") as log:
        p = launch(job, hf, sets, log)
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
    ok, cmp_out = env.compare(shard_files(ckpt_dir(d), 2), base, exact=True)
    env.check(ok, "after a shard's kill -9 and restart: bit-identical to the uninterrupted "
              "run: %s" % cmp_out.splitlines()[-1:])


def test_pytorch(env, hosts, work):
    """The PyTorch trainer (examples/pytorch/wdl.py) under torchrun: it
    finds its daemon from ESD_NODE_DIR and its rank, world and rendezvous
    from torchrun's variables (env://, no shared file)."""
    d, job, hf, sets = write_files(env, hosts, work, "pytorch", sets=["job.iterations=20"])
    with open(hf) as f:
        text = f.read()
    train = os.path.normpath(os.path.join(HERE, "..", "..", "examples", "pytorch", "wdl.py"))
    text = re.sub(r"(?m)^trainer = .*$", "trainer = %s %s" % (PY, train), text)
    with open(hf, "w") as f:
        f.write(text)
    rc, out = run_to_end(job, hf, sets, d, "launch", timeout=400)
    done = [ln for ln in out.splitlines()
            if ln.startswith("[trainers0]") and "done: 20 iterations" in ln and "final loss" in ln]
    env.check(rc == 0 and done, "PyTorch trainers under torchrun (2 nodes x 2): the job ends, "
              "rank 0 reports: %s" % (done[:1] or out.strip().splitlines()[-3:]))
    if rc == 0:
        env.check_transfers("multihost-pytorch", summaries(d))


def test_other_stream(env, hosts, work):
    other = os.path.join(work, "other.esd")
    subprocess.run([os.path.join(env.bin, "esd-data"), "gen", "-o", other, "--shape",
                    "criteo-kaggle", "-n", "8000", "--scale", "1000", "--max-rows", "2000",
                    "--seed", "8"], check=True, stdout=subprocess.DEVNULL)
    d, job, hf, sets = write_files(env, hosts, work, "other", {1: "data.stream=" + other})
    rc, out = run_to_end(job, hf, sets, d, "launch", timeout=120)
    digests = set(re.findall(r"\b([0-9a-f]{16})\b", out))
    env.check(rc == 1 and "failed: esdd1" in out and other in out and len(digests) >= 2,
              "a node with another stream is refused naming the file and both digests, and "
              "the launcher names it: %s" % [ln for ln in out.splitlines()
                                             if "failed:" in ln or "refused" in ln][:2])


def gen_doc_stream(env):
    """The doc's esd-data command, its tables smaller (--scale, --max-rows)
    and fewer samples: the job still wraps around the stream."""
    argv = doc_gen()
    argv[0] = os.path.join(env.bin, "esd-data")
    argv[argv.index("-o") + 1] = env.stream
    argv[argv.index("-n") + 1] = "20000"
    subprocess.run(argv + ["--scale", "1000", "--max-rows", "2000"], check=True,
                   stdout=subprocess.DEVNULL)


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
    gen_doc_stream(env)
    try:
        hosts = Hosts(doc_rates()).__enter__()
    except RuntimeError as e:
        print("skip: cannot make network namespaces here: %s" % e)
        return 77
    try:
        test_as_written(env, hosts, env.root)
        if SANITIZED:
            print("not run: the stop, kill and restart cases and the PyTorch case "
                  "(ESD_SANITIZED=1: what the launcher does is Python; their C side is "
                  "test_stop_resume's, test_ps_restart's and test_pytorch_models')")
        else:
            base = test_pinned(env, hosts, env.root)
            test_stop_and_resume(env, hosts, env.root, base)
            test_kill_all(env, hosts, env.root, base)
            test_shard_killed(env, hosts, env.root, base)
        if os.environ.get("ESD_PYTORCH_SKIP"):
            print("not run: the PyTorch case (%s)" % os.environ["ESD_PYTORCH_SKIP"])
        elif not SANITIZED:
            test_pytorch(env, hosts, env.root)
        test_other_stream(env, hosts, env.root)
    finally:
        hosts.__exit__()
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
