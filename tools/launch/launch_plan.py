"""esd-launch's two files: the job and the hosts file read, checked and
turned into what runs where (Plan). esd-launch starts and watches the
processes and imports this module.

Standard library only (any python3).
"""
import configparser
import os
import re
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# where the programs are when [launch] bin is not said: this tree's
# build/bin; an installed esd-launch sets the folder it lies in
BIN_DEFAULT = os.path.normpath(os.path.join(HERE, "..", "..", "build", "bin"))

# the [launch] keys, with their defaults (None: required or computed)
LAUNCH_KEYS = {
    "remote": "ssh -o BatchMode=yes {host} {cmd}", "bin": None, "workdir": None,
    "torchrun": "python3 -m torch.distributed.run", "trainer": "{bin}/esd-trainer --quiet",
    "master_port": "29500", "shard_restarts": "3", "max_restarts": "0",
    "rendezvous_timeout": "120", "start_timeout": "60", "stop_timeout": "300",
    "stop_grace": "10", "logdir": "esd-logs",
}


def die(msg):
    print("esd-launch: " + msg, file=sys.stderr, flush=True)
    sys.exit(2)


def read_ini(path, what):
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    cp.optionxform = str
    try:
        with open(path) as f:
            cp.read_file(f)
    except (OSError, configparser.Error) as e:
        die("%s %s: %s" % (what, path, e))
    return cp


def job_value(job, sets, key, default=None):
    for s in reversed(sets):
        k, _, v = s.partition("=")
        if k.strip() == key:
            return v.strip()
    sec, _, name = key.partition(".")
    return job.get(sec, name, fallback=default) if job.has_section(sec) else default


class Plan:
    """What runs where: the job's shape and every host, checked."""

    def __init__(self, job_path, hosts_path, sets, fresh):
        self.job_path = os.path.abspath(job_path)
        self.sets = sets
        self.fresh = fresh
        job = read_ini(job_path, "job")
        hosts = read_ini(hosts_path, "hosts file")
        self.hosts_path = hosts_path

        def num(key, default):
            v = job_value(job, sets, key, default)
            try:
                return int(v)
            except (TypeError, ValueError):
                die("job %s: %s = '%s': expected a number" % (job_path, key, v))
        self.n = num("workers.n", 8)
        self.shards = num("ps.shards", 1)
        self.trainers = num("workers.trainers", 1)
        addrs = job_value(job, sets, "ps.addrs", "")
        self.addrs = [a.strip() for a in addrs.split(",") if a.strip()]
        if len(self.addrs) != self.shards:
            die("job %s: ps.addrs has %d address(es) for %d shard(s)"
                % (job_path, len(self.addrs), self.shards))
        self.has_ckpt = bool(job_value(job, sets, "ps.checkpoint_dir", ""))
        # secure by default: without job.key, a new key for this run on
        # every host, unless the job says job.insecure in so many words
        self.insecure = str(job_value(job, sets, "job.insecure", "no")).lower() in (
            "1", "true", "yes", "on")
        self.own_key = not job_value(job, sets, "job.key", "") and not self.insecure
        self.read_launch(hosts)
        self.read_hosts(hosts)
        self.key_path = os.path.join(self.workdir, "job.key")

    def read_launch(self, hosts):
        """The [launch] section: how to reach a host, the programs, the
        restarts and every bound the launcher waits with."""
        hp = self.hosts_path
        if not hosts.has_section("launch"):
            die("hosts file %s: no [launch] section" % hp)
        la = hosts["launch"]
        unknown = [k for k in la if k not in LAUNCH_KEYS]
        if unknown:
            die("hosts file %s: [launch] %s: unknown (known: %s)"
                % (hp, ", ".join(unknown), ", ".join(LAUNCH_KEYS)))
        self.remote = la.get("remote", LAUNCH_KEYS["remote"])
        if "{cmd}" not in self.remote:
            die("hosts file %s: [launch] remote = '%s' has no {cmd}" % (hp, self.remote))
        self.bin = la.get("bin", BIN_DEFAULT)
        self.workdir = la.get("workdir")
        if not self.workdir:
            die("hosts file %s: [launch] needs workdir (a folder on every host)" % hp)
        self.torchrun = la.get("torchrun", LAUNCH_KEYS["torchrun"])
        self.trainer = la.get("trainer", LAUNCH_KEYS["trainer"]).replace("{bin}", self.bin)
        self.logdir = os.path.abspath(la.get("logdir", LAUNCH_KEYS["logdir"]))

        def number(key, kind, least):
            v = la.get(key, LAUNCH_KEYS[key])
            try:
                x = kind(v)
            except ValueError:
                x = None
            if x is None or x < least:
                die("hosts file %s: [launch] %s = '%s': expected a number >= %s"
                    % (hp, key, v, least))
            return x
        self.master_port = number("master_port", int, 1)
        self.grace = number("stop_grace", float, 0)
        # a shard that dies is started again from its checkpoint (the nodes
        # and the other shards go back to it), at most this many times
        self.shard_restarts = number("shard_restarts", int, 0)
        self.max_restarts = number("max_restarts", int, 0)
        self.rdzv_timeout = number("rendezvous_timeout", int, 1)
        self.start_timeout = number("start_timeout", float, 1)
        self.stop_timeout = number("stop_timeout", float, 1)
        self.restart_shards = self.shard_restarts > 0 and self.has_ckpt
        self.restart_trainers = self.max_restarts > 0

    def read_hosts(self, hosts):
        """[shardS] and [nodeW]: one per shard and node of the job."""
        self.shard_host, self.shard_listen = [], []
        for s in range(self.shards):
            sec = self.section(hosts, "shard%d" % s)
            self.shard_host.append(sec["host"])
            self.shard_listen.append(sec.get("listen", self.addrs[s]))
        self.node_host, self.node_addr, self.node_metrics, self.node_sets = [], [], [], []
        self.node_env = []
        for w in range(self.n):
            sec = self.section(hosts, "node%d" % w)
            self.node_host.append(sec["host"])
            self.node_addr.append(sec.get("address", sec["host"]))
            self.node_metrics.append(sec.get("metrics"))
            self.node_sets.append(shlex.split(sec.get("set", "")))
            self.node_env.append(shlex.split(sec.get("env", "")))
        extra = [s for s in hosts.sections() if s != "launch" and not (
            re.fullmatch(r"shard(\d+)", s) and int(s[5:]) < self.shards or
            re.fullmatch(r"node(\d+)", s) and int(s[4:]) < self.n)]
        if extra:
            die("hosts file %s: sections %s match no shard (ps.shards = %d) or node "
                "(workers.n = %d)" % (self.hosts_path, ", ".join(extra), self.shards, self.n))

    def section(self, hosts, name):
        if not hosts.has_section(name) or not hosts[name].get("host"):
            die("hosts file %s: [%s] with a host is missing" % (self.hosts_path, name))
        return hosts[name]

    def remote_argv(self, host, cmd):
        """The local argv that runs shell command cmd on host."""
        out = []
        for tok in shlex.split(self.remote):
            if tok == "{cmd}":
                out.append(cmd)
            else:
                out.append(tok.replace("{host}", host))
        return out

    def restart_sets(self):
        """What every process is told about restarts: the launcher's own
        (a --set of the same key on the command line comes after it and
        wins)."""
        return ["job.restart_shards=%s" % ("true" if self.restart_shards else "false"),
                "job.restart_trainers=%s" % ("true" if self.restart_trainers else "false")]

    def restart_text(self):
        """The restart settings and the rendezvous bound in words, one line
        each, for --check and the start."""
        sets = self.restart_sets()
        out = ["restarts: a dead shard: " + (
            "esd-launch starts it again from its checkpoint, at most %d times"
            % self.shard_restarts if self.restart_shards else
            "nobody restarts it, the job fails (%s)"
            % ("no ps.checkpoint_dir" if not self.has_ckpt else "shard_restarts = 0")) +
            " (--set %s)" % sets[0],
            "restarts: a dead trainer: " + (
            "torchrun restarts its node's trainers, at most %d times (--max_restarts %d)"
            % (self.max_restarts, self.max_restarts) if self.restart_trainers else
            "nobody restarts it, the job fails (max_restarts = 0)") + " (--set %s)" % sets[1],
            "rendezvous: every node's trainers attached to their node daemon within %d s "
            "(rendezvous_timeout; torchrun --rdzv_conf timeout=%d)"
            % (self.rdzv_timeout, self.rdzv_timeout)]
        over = [s for s in self.sets if s.partition("=")[0].strip() in
                ("job.restart_shards", "job.restart_trainers")]
        if over:
            out.append("restarts: overridden on the command line: --set " +
                       " --set ".join(over))
        return out

    def key_sets(self):
        """job.key of the key the launcher makes, when it makes one."""
        return ["job.key=" + self.key_path] if self.own_key else []

    def key_text(self):
        """The job key in words, for --check and the start."""
        if self.own_key:
            return ("job key: a new one for this run (64 hex digits, mode 0600) at %s on "
                    "every host (--set job.key=%s; name your own with job.key, or run "
                    "without one with job.insecure = yes)" % (self.key_path, self.key_path))
        if self.insecure:
            return ("INSECURE job (job.insecure = yes): no job key; anyone who reaches "
                    "the shards' ports can join the job")
        return "job key: job.key, on every host already"

    def sets_argv(self):
        out = []
        for s in self.key_sets() + self.restart_sets() + self.sets:
            out += ["--set", s]
        return out

    # the commands, as argv lists run on the host
    def ps_cmd(self, s, restore=False):
        argv = [os.path.join(self.bin, "esd-ps"), "--config", self.job_path, "--shard", str(s),
                "--listen", self.shard_listen[s], "--control",
                os.path.join(self.workdir, "ps%d.sock" % s)]
        mode = ["--restore"] if restore else [] if self.fresh else ["--resume"]
        return argv + mode + self.sets_argv()

    def node_dir(self, w):
        return os.path.join(self.workdir, "node%d" % w)

    def esdd_cmd(self, w):
        return [os.path.join(self.bin, "esdd"), "--config", self.job_path, "--rank", str(w),
                "--dir", self.node_dir(w), "--summary",
                os.path.join(self.workdir, "summary%d.json" % w)] + self.sets_argv() + \
            [x for kv in self.node_sets[w] for x in ("--set", kv)]

    def trainer_cmd(self, w):
        env = ["env", "ESD_NODE_DIR=" + self.node_dir(w)] + self.node_env[w]
        return env + shlex.split(self.torchrun) + [
            "--nnodes", str(self.n), "--node_rank", str(w), "--nproc_per_node",
            str(self.trainers), "--master_addr", self.node_addr[0], "--master_port",
            str(self.master_port), "--max_restarts", str(self.max_restarts),
            # the launcher's rendezvous watch and torchrun's agree on the limit
            "--rdzv_conf", "timeout=%d" % self.rdzv_timeout,
            # a worker's exit is seen within a second, not five
            "--monitor_interval", "1",
            # torch 1.13 on Python 3.11 fails on its default redirects ("0")
            "--redirects", "1", "--tee", "1", "--no_python"] + shlex.split(self.trainer)

    def metrics_cmd(self, w):
        addr, _, port = self.node_metrics[w].rpartition(":")
        return [os.path.join(self.bin, "esdctl"), "--node", self.node_dir(w), "serve-metrics",
                "--port", port, "--bind", addr]

    def esdctl_stop_cmd(self):
        return [os.path.join(self.bin, "esdctl"), "--socket",
                os.path.join(self.workdir, "ps0.sock"), "stop"]

    def node_status_cmd(self, w):
        return [os.path.join(self.bin, "esdctl"), "--socket",
                os.path.join(self.node_dir(w), "control.sock"), "--json", "--timeout", "2000",
                "status"]
