"""Start and stop a local ESD job: one PS shard, n node daemons, n trainers.

Used by the runtime's end-to-end tests and by the testbed. Standard
library only. Every process started here is stopped here, by its PID, also
when the caller raises or is interrupted.

    with Cluster(bin_dir, work_dir, settings) as c:
        c.start()
        c.wait()           # daemons done
        summaries = c.summaries()

Every process writes WORK/NAME.log (ps0, esdd0, trainer0, trainer0.1, ...).
Nothing here restarts a process by itself: the job is told so
(job.restart_trainers and job.restart_shards false) unless the caller says
it will (restart_trainers=True: it starts a new trainer after one dies;
restart_shards=True: it starts a dead shard again with start_ps(restore=True)).
When the job fails, wait() raises a ClusterError (also printed on stderr)
naming the process whose failure started it (the trainer a daemon names in
its failure, else the first process to exit non-zero), with the last lines
of its log and the log's path. Every wait is bounded and says what it waits
for.

Every job gets a key (WORK/job.key, mode 0600, as esdctl keygen makes it)
unless its settings name one (job.key) or say "job.insecure": "yes" (a
keyless job: every process warns; shards and daemons refuse to start
without a key otherwise).
"""
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

TAIL_LINES = 20  # lines of a failed process's log shown in the error


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


def insecure(settings):
    """Whether the job settings say job.insecure (a job without a key)."""
    return str(settings.get("job.insecure", "no")).strip().lower() in ("1", "true", "yes", "on")


def ctl_call(path, cmd, timeout=0.5):
    """One request {"cmd": cmd} on a control socket (esdd's, a shard's);
    returns the reply's JSON."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall((json.dumps({"cmd": cmd}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return json.loads(buf.decode())
    finally:
        s.close()


class ClusterError(RuntimeError):
    pass


def log_tail(path, n=TAIL_LINES):
    """The last n lines of the file at path ([] when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return data.splitlines()[-n:]


# how a daemon names the trainer whose failure fails the job:
# "trainer I (pid P) failed: TEXT" or "... died: TEXT"
TRAINER_FAILURE = re.compile(r"(?:node (\d+): )?trainer (\d+) \(pid (\d+)\) (?:failed|died)\b")


def exit_text(rc):
    return "was killed by signal %d" % -rc if rc < 0 else "exited with status %d" % rc


class Cluster:
    def __init__(self, bin_dir, work_dir, settings, emulate_ns=None, shards=1,
                 log=None, trainer_cmd=None, wrap=None, ps_listen=None, daemon_ps=None,
                 after_daemons=None, restart_trainers=False, restart_shards=False):
        """restart_trainers / restart_shards: the caller replaces a trainer
        that dies (start_trainer) / restarts a shard that dies
        (start_ps(restore=True)); the job's daemons then wait for it
        (job.restart_trainers, job.restart_shards; a value in settings wins).
        Optional hooks (the testbed's network-namespace mode uses them):
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
        self.settings.setdefault("job.restart_trainers",
                                 "true" if restart_trainers else "false")
        self.settings.setdefault("job.restart_shards", "true" if restart_shards else "false")
        self.n = int(self.settings.get("workers.n", 8))
        self.trainers = int(self.settings.get("workers.trainers", 1))
        self.shards = shards
        self.emulate_ns = emulate_ns
        self.trainer_cmd = trainer_cmd  # callable(rank, node_dir) -> argv
        self.procs = {}  # name -> Popen
        self.exits = {}  # name -> (time first seen exited, status)
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
        self.exits.pop("ps%d" % shard, None)
        line = self._first_line(p, "esd-ps shard %d to say it listens" % shard, 30)
        m = re.search(r"listening on (\S+) (\S+)", line)
        if not m:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            raise ClusterError(self.describe("ps%d" % shard, "did not start listening"))
        return m.group(2)

    def _first_line(self, p, what, timeout):
        """p's first stdout line, waiting at most timeout seconds ("" when
        none came: p exited or the time ran out, said on stderr)."""
        got = []
        t = threading.Thread(target=lambda: got.append(p.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            print("esdcluster: waited %d s for %s; giving up" % (timeout, what),
                  file=sys.stderr, flush=True)
            return ""
        return got[0] if got else ""

    def start(self, resume=False):
        """Start the job; resume: the shards resume from their checkpoints
        when they exist (a job started again after a stop)."""
        if os.path.exists(self.job):
            os.unlink(self.job)
        self.settings["ps.shards"] = self.shards
        # secure by default: a key unless the job says job.insecure (then
        # none, unless it names one)
        if "job.key" not in self.settings and not insecure(self.settings):
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
        t0 = time.monotonic()
        while not os.path.exists(sock):
            p = self.procs.get("esdd%d" % w)
            if p and p.poll() is not None:
                raise ClusterError(self.describe("esdd%d" % w, "%s before it opened %s"
                                                 % (exit_text(p.returncode), sock)))
            if time.monotonic() - t0 > timeout:
                raise ClusterError(self.describe("esdd%d" % w, "did not open %s within %d s"
                                                 % (sock, timeout)))
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
        name = "trainer%d" % w if i == 0 else "trainer%d.%d" % (w, i)
        self.exits.pop(name, None)
        self._spawn(name, argv)

    # -- failures -----------------------------------------------------------
    def note_exits(self):
        """Record when each process was first seen exited (the order in
        which a failure spread)."""
        now = time.monotonic()
        for name, p in self.procs.items():
            if name not in self.exits and p.poll() is not None:
                self.exits[name] = (now, p.returncode)

    def log_path(self, name):
        return os.path.join(self.work, name + ".log")

    def describe(self, name, what):
        """'NAME WHAT; its last lines (LOG): ...' for an error message."""
        path = self.log_path(name)
        tail = log_tail(path)
        return "%s %s; %s (%s):\n%s" % (
            name, what, "its last %d lines" % len(tail) if tail else "nothing in its log",
            path, "\n".join("    " + ln for ln in tail))

    def _trainer_named(self, name):
        """The trainer a daemon's failure text names (its own or one it
        relays from another node), as (its process name, the text), else
        None."""
        for ln in reversed(log_tail(self.log_path(name), 200)):
            m = TRAINER_FAILURE.search(ln)
            if not m:
                continue
            text = ln[m.start():].strip()
            pid = int(m.group(3))
            for tname, p in self.procs.items():
                if tname.startswith("trainer") and p.pid == pid:
                    return tname, text
            w = int(m.group(1) if m.group(1) else name[len("esdd"):])
            i = int(m.group(2))
            return ("trainer%d" % w if i == 0 else "trainer%d.%d" % (w, i)), text
        return None

    def origin(self):
        """Name, and how it failed, of the process whose failure started a
        failed job: the trainer a daemon names in its failure, else the
        first process seen to exit non-zero."""
        self.note_exits()
        bad = sorted((t, name) for name, (t, rc) in self.exits.items() if rc != 0)
        for _, name in bad:
            if name.startswith("esdd"):
                named = self._trainer_named(name)
                if named and named[0] in self.procs:
                    return named[0], "(%s says: %s)" % (name, named[1])
        if not bad:
            return None, ""
        name = bad[0][1]
        return name, exit_text(self.exits[name][1]) + ", the first process to fail"

    def failure(self, what):
        """A ClusterError for a failed job, naming the process that
        started the failure with its last lines; printed on stderr too."""
        name, how = self.origin()
        msg = what
        if name:
            msg += "; the failure started with " + self.describe(name, how)
        print("esdcluster: " + msg, file=sys.stderr, flush=True)
        return ClusterError(msg)

    def wait(self, timeout=300):
        """Wait for every daemon; raise if one fails (naming the process
        whose failure started it) or one is still running after timeout
        seconds."""
        t0 = time.monotonic()
        daemons = ["esdd%d" % w for w in range(self.n)]
        while True:
            self.note_exits()
            for name in daemons:
                rc = self.procs[name].poll()
                if rc not in (None, 0):
                    raise self.failure("%s %s (%s)" % (name, exit_text(rc),
                                                       self.log_path(name)))
            if all(self.procs[d].poll() == 0 for d in daemons):
                break
            if time.monotonic() - t0 > timeout:
                left = [d for d in daemons if self.procs[d].poll() is None]
                raise ClusterError("waited %d s for the node daemons to end; still running: %s"
                                   % (timeout, ", ".join(left)))
            time.sleep(0.02)
        for name, p in self.procs.items():
            if name.startswith("trainer"):
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    print("esdcluster: %s still running 10 s after its daemon ended; "
                          "stop() ends it" % name, file=sys.stderr, flush=True)

    def summaries(self):
        out = []
        for w in range(self.n):
            with open(os.path.join(self.work, "summary%d.json" % w)) as f:
                out.append(json.load(f))
        return out

    def kill(self, name, sig=signal.SIGKILL, timeout=30):
        """Send sig to process name and wait (at most timeout s) for it."""
        p = self.procs[name]
        os.kill(p.pid, sig)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ClusterError("%s did not exit within %d s of signal %d"
                               % (name, timeout, sig))

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
            deadline = time.monotonic() + grace
            for p in live:
                try:
                    p.wait(timeout=max(0.01, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            for p in live:
                if p.poll() is None:
                    try:
                        os.kill(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    try:
                        p.wait(timeout=10)
                    except subprocess.TimeoutExpired:  # in the kernel (D state)
                        print("esdcluster: pid %d still there 10 s after SIGKILL; left "
                              "behind" % p.pid, file=sys.stderr, flush=True)
        for p in self.procs.values():
            if p.stdout:
                p.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
