"""tools/k8s/esd-k8s's manifests against the Kubernetes API's OpenAPI
schemas, offline: tools/k8s/validate.mjs validates every object with the
kubernetes-models class of its kind (what kubectl's server-side
validation checks of the fields; no API server is reachable here). A
manifest broken on purpose (a replica count as a string, a port that is
not a number) must fail, naming the field.

Exits 77 when node or the models are missing (scripts/setup-deps.sh
installs both; the models under /var/lib/esd-deps/k8s, or $ESD_K8S_MODELS).

usage: test_k8s_schema.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools", "k8s")
MODELS = os.environ.get("ESD_K8S_MODELS", "/var/lib/esd-deps/k8s")
JOB = ("[job]\niterations = 100\n[workers]\nn = 3\ntrainers = 2\n"
       "[data]\nstream = /data/criteo.esd\n[ps]\nshards = 2\nbackend = dpdk\n"
       "addrs = 10.0.0.1:7000,10.0.0.1:7001\n")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def validate(path):
    return subprocess.run(["node", os.path.join(TOOLS, "validate.mjs"), MODELS, path],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main():
    node = shutil.which("node")
    if not node or not os.path.isdir(os.path.join(MODELS, "node_modules", "kubernetes-models")):
        print("SKIP: %s (scripts/setup-deps.sh installs node and kubernetes-models under %s)"
              % ("no node" if not node else "no kubernetes-models", MODELS))
        return 77
    d = tempfile.mkdtemp(prefix="esd-k8s-schema.")
    try:
        job, key, out = (os.path.join(d, f) for f in ("job.ini", "job.key", "esd.yaml"))
        with open(job, "w") as f:
            f.write(JOB)
        with open(key, "w") as f:
            f.write("ab" * 32 + "\n")
        r = subprocess.run([sys.executable, os.path.join(TOOLS, "esd-k8s"), job, "--name",
                            "edge", "--namespace", "ml", "--key", key, "-o", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 0, "esd-k8s writes the manifests: %s" % r.stdout.strip())
        r = validate(out)
        kinds = [ln.split(", ")[-1].split(":")[0] for ln in r.stdout.splitlines()
                 if ln.startswith("ok")]
        check(r.returncode == 0 and len(kinds) == 6,
              "every object is valid against the API's schema: %s" % (kinds or r.stdout))
        docs = [json.loads(t) for t in open(out).read().split("---\n") if t.strip()]
        for doc in docs:
            if doc["kind"] == "StatefulSet":
                doc["spec"]["replicas"] = "three"
                doc["spec"]["template"]["spec"]["containers"][0]["ports"] = [
                    {"containerPort": "esd"}]
        bad = os.path.join(d, "bad.yaml")
        with open(bad, "w") as f:
            f.write("".join("---\n" + json.dumps(doc, indent=1) + "\n" for doc in docs))
        r = validate(bad)
        check(r.returncode == 1 and "spec/replicas must be integer" in r.stdout
              and "containerPort must be integer" in r.stdout,
              "a broken StatefulSet fails, naming the fields: %s"
              % [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL")][:1])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
