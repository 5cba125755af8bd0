"""examples/slurm/esd.sbatch through a real Slurm: the test starts its own
munged, slurmctld and slurmd (one node, several tasks; a slurm.conf in a
temporary folder, loopback ports), submits a job with sbatch (2 PS
shards, one esdd, 2 C trainers, every one an srun step) and checks it
ends with the final tables equal to esd-ref's; then a second job is
stopped with `scancel --batch --signal=TERM` (the script asks shard 0 for
a graceful stop at a checkpoint boundary), the same script submitted
again resumes and ends equal to the reference too. Everything started is
stopped by PID.

usage: test_slurm.py BIN_DIR
Exits 77 with the reason when Slurm or munge is not installed, when not
root (slurmd runs jobs as their user), or when the daemons cannot start.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from e2e_util import Env, ctl, shard_files  # noqa: E402
from esdcluster import write_ini  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "..", "examples", "slurm", "esd.sbatch")
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "srun")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Slurm:
    """munged + slurmctld + slurmd of a one-node cluster in folder d."""

    def __init__(self, d):
        self.d = d
        self.procs = []
        self.node = socket.gethostname().split(".")[0]
        self.conf = os.path.join(d, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def start(self):
        d = self.d
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(d, "munge", "munge.sock")
        os.makedirs(os.path.dirname(sock), mode=0o755)
        self.spawn("munged", ["munged", "-F", "--force", "--key-file", key, "--socket", sock,
                              "--pid-file", os.path.join(d, "munged.pid"),
                              "--log-file", os.path.join(d, "munged.log"),
                              "--seed-file", os.path.join(d, "munged.seed")])
        if not self.wait_for(lambda: os.path.exists(sock), 10):
            return "munged did not start: " + self.tail("munged")
        for sub in ("ctld", "spool"):
            os.makedirs(os.path.join(d, sub))
        with open(self.conf, "w") as f:
            f.write(CONF.format(d=d, node=self.node, sock=sock, cport=free_port(),
                                dport=free_port(), cpus=8))
        self.spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        self.spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.node])
        ok = self.wait_for(lambda: "idle" in self.run(["sinfo", "-h", "-o", "%T"]).stdout, 30)
        if not ok:
            return "the node did not come up idle: %s | slurmctld: %s | slurmd: %s" % (
                self.run(["sinfo", "-h"]).stdout.strip(), self.tail("slurmctld"),
                self.tail("slurmd"))
        return None

    def spawn(self, name, argv):
        out = open(os.path.join(self.d, name + ".out"), "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=out, stderr=out, env=self.env,
                                                  start_new_session=True)))

    def tail(self, name):
        for f in (name + ".log", name + ".out"):
            p = os.path.join(self.d, f)
            if os.path.exists(p) and os.path.getsize(p):
                return " / ".join(open(p).read().strip().splitlines()[-3:])
        return "(no output)"

    def wait_for(self, cond, limit_s):
        t0 = time.time()
        while time.time() - t0 < limit_s:
            if cond():
                return True
            if any(p.poll() is not None for _, p in self.procs):
                return False
            time.sleep(0.2)
        return False

    def run(self, argv, **kw):
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=self.env, timeout=60, **kw)

    def state(self, job):
        out = self.run(["scontrol", "-o", "show", "job", job]).stdout
        for w in out.split():
            if w.startswith("JobState="):
                return w.split("=", 1)[1]
        return "?"

    def wait_job(self, job, limit_s=300):
        t0 = time.time()
        st = "?"
        while time.time() - t0 < limit_s:
            st = self.state(job)
            if st in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                      "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"):
                return st
            time.sleep(0.3)
        return "still " + st

    def stop(self):
        for _, p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for _, p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


CONF = """ClusterName=esdtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={cport}
SlurmdPort={dport}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/ctld
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=30
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def submit(env, sl, job_ini, work, port, name, trainer):
    r = sl.run(["sbatch", "--parsable", "--job-name", name, "--nodes=1",
                "--ntasks-per-node=2", "--output", os.path.join(env.root, name + "-%j.out"),
                "--export=ALL,ESD_BIN=%s,ESD_WORKDIR=%s,ESD_PS_PORT=%d,ESD_TRAINER=%s"
                % (env.bin, work, port, trainer), SCRIPT, job_ini])
    env.check(r.returncode == 0, "sbatch %s: %s" % (name, r.stdout.strip()))
    return r.stdout.strip().split(";")[0]


def job_output(env, name, job):
    p = os.path.join(env.root, "%s-%s.out" % (name, job))
    return open(p).read() if os.path.exists(p) else "(no output)"


def show(ok, out):
    """A job's output, when its check failed."""
    if not ok:
        print(out[-4000:])


def job_file(env, name, iters):
    s = env.settings(**{"workers.n": 1, "workers.batch": 64, "workers.trainers": 2,
                        "job.iterations": iters, "ps.shards": 2,
                        "ps.addrs": "127.0.0.1:1,127.0.0.1:2"})
    work, ck = env.run_dirs(s, name)
    ini = os.path.join(work, "job.ini")
    write_ini(ini, s)
    return s, work, ck, ini


def run_to_end(env, sl):
    s, work, ck, ini = job_file(env, "full", 40)
    job = submit(env, sl, ini, work, free_port(), "full",
                 os.path.join(env.bin, "esd-trainer") + " --quiet")
    st = sl.wait_job(job)
    out = job_output(env, "full", job)
    env.check(st == "COMPLETED", "sbatch job %s ran to its end: %s" % (job, st))
    show(st == "COMPLETED", out)
    ref = env.reference("full", s)
    ok, cmp = env.compare(shard_files(ck, 2), ref)
    env.check(ok, "final tables == esd-ref (rtol 1e-5): %s" % cmp.splitlines()[-1:])


def cancel_and_resume(env, sl):
    # long enough to be stopped half-way (the trainers compute for real:
    # the tables are compared with esd-ref's)
    iters = 2000
    s, work, ck, ini = job_file(env, "resume", iters)
    trainer = os.path.join(env.bin, "esd-trainer") + " --quiet"
    port = free_port()
    job = submit(env, sl, ini, work, port, "resume1", trainer)
    sock = os.path.join(work, "ps0.sock")
    got, t0 = 0, time.time()
    while got < 20 and time.time() - t0 < 120 and sl.state(job) in ("PENDING", "RUNNING", "?"):
        try:
            got = ctl(sock, "status")["iteration"]
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    env.check(20 <= got < iters, "the first job is running (iteration %d)" % got)
    sl.run(["scancel", "--batch", "--signal=TERM", job])
    st = sl.wait_job(job)
    out = job_output(env, "resume1", job)
    env.check(st == "COMPLETED" and "stop asked" in out,
              "scancel --batch --signal=TERM: a graceful stop, exit 0: %s" % st)
    show(st == "COMPLETED" and "stop asked" in out, out)
    r = subprocess.run([os.path.join(env.bin, "esd-ref"), "info",
                        os.path.join(ck, "ps-shard0.ckpt")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"iteration (\d+),", r.stdout)
    at = int(m.group(1)) if m else -1
    env.check(got <= at < iters, "stopped at a checkpoint boundary, iteration %d" % at)
    job2 = submit(env, sl, ini, work, port, "resume2", trainer)
    st = sl.wait_job(job2, limit_s=400)
    out2 = job_output(env, "resume2", job2)
    resumed = "resumes after iteration %d" % at in out2
    env.check(st == "COMPLETED" and resumed,
              "the same script again resumed after iteration %d and ran to its end: %s"
              % (at, st))
    show(st == "COMPLETED" and resumed, out2)
    ref = env.reference("resume", s)
    ok, cmp = env.compare(shard_files(ck, 2), ref)
    env.check(ok, "stopped and resumed: final tables == esd-ref: %s" % cmp.splitlines()[-1:])


def main():
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        print("SKIP: not installed: %s (scripts/setup-deps.sh: slurm-wlm munge)"
              % " ".join(missing))
        return 77
    if os.geteuid() != 0:
        print("SKIP: not root: slurmd runs the job's steps as the submitting user")
        return 77
    env = Env(os.path.abspath(sys.argv[1]), "slurm")
    env.gen_stream()
    sl = Slurm(os.path.join(env.root, "slurm"))
    os.makedirs(sl.d)
    try:
        why = sl.start()
        if why:
            print("SKIP: Slurm cannot run here: " + why)
            return 77
        run_to_end(env, sl)
        cancel_and_resume(env, sl)
    finally:
        sl.stop()
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
