"""Start and stop a local ESD job: one PS shard, n node daemons, n trainers.

Used by the runtime's end-to-end tests and by the testbed. Standard
library only. Every process started here is stopped here, by its PID, also
when the caller raises or is interrupted.

    with Cluster(bin_dir, work_dir, settings) as c:
        c.start()
        c.wait()           # daemons done
        summaries = c.summaries()
"""
import json
import os
import re
import secrets
import signal
import subprocess
import time


def write_ini(path, settings):
    """settings: {"section.key": value}; written as an INI file."""
    sections = {}
    for k, v in settings.items():
        sec, key = k.split(".", 1)
        sections.setdefault(sec, {})[key] = v
    with open(path, "w") as f:
        for sec, kv in sections.items():
            f.write("[%s]\n" % sec)
            for key, v in kv.items():
                if isinstance(v, (list, tuple)):
                    v = ",".join(str(x) for x in v)
                f.write("%s = %s\n" % (key, v))
            f.write("\n")


def make_key(path):
    """A job key file (esd/auth.h: 64 hex digits, mode 0600), as esdctl
    keygen writes one; an existing one is kept (a job started again)."""
    if not os.path.exists(path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    return path


class ClusterError(RuntimeError):
    pass


class Cluster:
    def __init__(self, bin_dir, work_dir, settings, emulate_ns=None, shards=1,
                 log=None, trainer_cmd=None, wrap=None, ps_listen=None, daemon_ps=None,
                 after_daemons=None):
        """Optional hooks (the testbed's network-namespace mode uses them):
        wrap(name) -> argv prefix for process 'name' (e.g. ip netns exec NS);
        ps_listen(shard) -> the address esd-ps listens on (default 127.0.0.1:0);
        daemon_ps(rank, ps_addrs) -> the ps.addrs value daemon 'rank' uses;
        after_daemons(cluster) runs once every daemon is up, before trainers."""
        self.wrap = wrap
        self.ps_listen = ps_listen
        self.daemon_ps = daemon_ps
        self.after_daemons = after_daemons
        self.bin = bin_dir
        self.work = work_dir
        self.settings = dict(settings)
        self.n = int(self.settings.get("workers.n", 8))
        self.trainers = int(self.settings.get("workers.trainers", 1))
        self.shards = shards
        self.emulate_ns = emulate_ns
        self.trainer_cmd = trainer_cmd  # callable(rank, node_dir) -> argv
        self.procs = {}  # name -> Popen
        self.logf = log
        os.makedirs(work_dir, exist_ok=True)
        self.job = os.path.join(work_dir, "job.ini")

    # -- processes --------------------------------------------------------
    def _spawn(self, name, argv, **kw):
        if self.wrap:
            argv = list(self.wrap(name)) + list(argv)
        out = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=kw.pop("stdout", out), stderr=out,
                             start_new_session=True, **kw)
        self.procs[name] = p
        return p

    def node_dir(self, rank):
        return os.path.join(self.work, "node%d" % rank)

    def start_ps(self, shard=0, restore=False, resume=False):
        argv = [os.path.join(self.bin, "esd-ps"), "--config", self.job, "--shard",
                str(shard), "--control", os.path.join(self.work, "ps%d.sock" % shard)]
        if getattr(self, "ps_addr", None):
            argv += ["--listen", self.ps_addr[shard]]
        elif self.ps_listen:
            argv += ["--listen", self.ps_listen(shard)]
        else:
            argv += ["--listen", "127.0.0.1:0"]
        if restore:
            argv.append("--restore")
        if resume:
            argv.append("--resume")
        p = self._spawn("ps%d" % shard, argv, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        m = re.search(r"listening on (\S+) (\S+)", line)
        if not m:
            p.wait(timeout=5)
            raise ClusterError("esd-ps did not start: see %s/ps%d.log" % (self.work, shard))
        return m.group(2)

    def start(self, resume=False):
        """Start the job; resume: the shards resume from their checkpoints
        when they exist (a job started again after a stop)."""
        if os.path.exists(self.job):
            os.unlink(self.job)
        self.settings["ps.shards"] = self.shards
        if "job.key" not in self.settings:  # "" in settings: no key
            self.settings["job.key"] = make_key(os.path.join(self.work, "job.key"))
        write_ini(self.job, self.settings)
        self.ps_addr = [self.start_ps(s, resume=resume) for s in range(self.shards)]
        addrs = ",".join(self.ps_addr)
        for w in range(self.n):
            self.start_daemon(w, addrs)
        if self.after_daemons:
            for w in range(self.n):
                self.wait_socket(w)
            self.after_daemons(self)
        for w in range(self.n):
            for i in range(self.trainers):
                self.start_trainer(w, i)

    def settle_trainers(self, rounds=10, pause=0.1):
        """Restart a trainer that failed at once while its daemon runs. Not
        called by start(): esdd now renames its socket into place once it
        listens, so a trainer is never refused for connecting too early, and
        restarting trainers silently would hide real failures."""
        tries = {}
        for _ in range(rounds):
            time.sleep(pause)
            again = False
            for w in range(self.n):
                t, d = self.procs.get("trainer%d" % w), self.procs.get("esdd%d" % w)
                if not t or t.poll() in (None, 0) or not d or d.poll() is not None:
                    continue
                if tries.get(w, 0) >= 5:
                    continue
                tries[w] = tries.get(w, 0) + 1
                self.start_trainer(w)
                again = True
            if not again and all(self.procs["trainer%d" % w].poll() is None
                                 for w in range(self.n) if "trainer%d" % w in self.procs):
                return

    def start_daemon(self, w, addrs=None):
        addrs = addrs or ",".join(self.ps_addr)
        if self.daemon_ps:
            addrs = self.daemon_ps(w, self.ps_addr)
        argv = [os.path.join(self.bin, "esdd"), "--config", self.job, "--rank", str(w),
                "--dir", self.node_dir(w), "--set", "ps.addrs=" + addrs,
                "--summary", os.path.join(self.work, "summary%d.json" % w)]
        if self.n > 1:  # leave the cores to the trainers on a small machine
            argv += ["--dispatcher-core", "-1"]
        self._spawn("esdd%d" % w, argv)

    def wait_socket(self, w, timeout=30):
        sock = os.path.join(self.node_dir(w), "esdd.sock")
        t0 = time.time()
        while not os.path.exists(sock):
            p = self.procs.get("esdd%d" % w)
            if p and p.poll() is not None:
                raise ClusterError("esdd%d exited with %d: see %s/esdd%d.log"
                                   % (w, p.returncode, self.work, w))
            if time.time() - t0 > timeout:
                raise ClusterError("esdd%d did not open its socket" % w)
            time.sleep(0.02)

    def start_trainer(self, w, i=0):
        """Start trainer i of node w (workers.trainers per node), named
        trainer<w> for i = 0 and trainer<w>.<i> after."""
        self.wait_socket(w)
        if self.trainer_cmd:
            argv = self.trainer_cmd(w, self.node_dir(w))
        else:
            argv = [os.path.join(self.bin, "esd-trainer"), "--dir", self.node_dir(w),
                    "--quiet"]
            if self.emulate_ns is not None:
                argv += ["--emulate", str(self.emulate_ns)]
        self._spawn("trainer%d" % w if i == 0 else "trainer%d.%d" % (w, i), argv)

    def wait(self, timeout=300):
        """Wait for every daemon; raise if one fails."""
        t0 = time.time()
        for w in range(self.n):
            p = self.procs["esdd%d" % w]
            left = max(1, timeout - (time.time() - t0))
            try:
                rc = p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise ClusterError("esdd%d still running after %d s" % (w, timeout))
            if rc != 0:
                raise ClusterError("esdd%d exited with %d: see %s/esdd%d.log"
                                   % (w, rc, self.work, w))
        for name, p in self.procs.items():
            if name.startswith("trainer"):
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass

    def summaries(self):
        out = []
        for w in range(self.n):
            with open(os.path.join(self.work, "summary%d.json" % w)) as f:
                out.append(json.load(f))
        return out

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs[name]
        os.kill(p.pid, sig)
        p.wait()

    def stop(self, grace=3.0):
        """Stop every process started here, by PID: trainers, then daemons,
        then the PS (memif-safe order). Each group gets SIGTERM at once and
        'grace' seconds in all; what is left then gets SIGKILL (a daemon
        waiting for a trainer may not act on SIGTERM)."""
        groups = [[], [], []]
        for name, p in self.procs.items():
            groups[0 if name.startswith("trainer") else 1 if name.startswith("esdd")
                   else 2].append(p)
        for group in groups:
            live = [p for p in group if p.poll() is None]
            for p in live:
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            deadline = time.time() + grace
            for p in live:
                try:
                    p.wait(timeout=max(0.01, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    pass
            for p in live:
                if p.poll() is None:
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    p.wait()
        for p in self.procs.values():
            if p.stdout:
                p.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
