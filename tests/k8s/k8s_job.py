"""What the Kubernetes tests share: the job they generate manifests for,
a run of tools/k8s/esd-k8s on it, and the checks' tally."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools", "k8s")
GEN = os.path.join(TOOLS, "esd-k8s")
# 2 shards, 3 node pods of 2 trainers each, dpdk links.
SHARDS, WORKERS, TRAINERS = 2, 3, 2
JOB = ("[job]\niterations = 100\n[workers]\nn = 3\ntrainers = 2\n"
       "[data]\nstream = /data/criteo.esd\n[ps]\nshards = 2\nbackend = dpdk\n"
       "addrs = 10.0.0.1:7000,10.0.0.1:7001\n")
KEY = "ab" * 32
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def docs(text):
    return [json.loads(d) for d in text.split("---\n") if d.strip()]


def generate(d):
    """Writes JOB and its key under d and runs esd-k8s on them; returns
    the manifests' path, the run checked."""
    job, key, out = (os.path.join(d, f) for f in ("job.ini", "job.key", "esd.yaml"))
    with open(job, "w") as f:
        f.write(JOB)
    with open(key, "w") as f:
        f.write(KEY + "\n")
    r = subprocess.run([sys.executable, GEN, job, "--name", "edge", "--namespace", "ml",
                        "--key", key, "-o", out], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, "esd-k8s writes the manifests: %s" % r.stdout.strip())
    return out


def verdict():
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0
