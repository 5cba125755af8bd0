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

from k8s_job import TOOLS, check, docs, generate, verdict

MODELS = os.environ.get("ESD_K8S_MODELS", "/var/lib/esd-deps/k8s")
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
        out = generate(d)
        r = validate(out)
        kinds = [ln.split(", ")[-1].split(":")[0] for ln in r.stdout.splitlines()
                 if ln.startswith("ok")]
        check(r.returncode == 0 and len(kinds) == 6,
              "every object is valid against the API's schema: %s" % (kinds or r.stdout))
        objs = docs(open(out).read())
        for doc in objs:
            if doc["kind"] == "StatefulSet":
                doc["spec"]["replicas"] = "three"
                doc["spec"]["template"]["spec"]["containers"][0]["ports"] = [
                    {"containerPort": "esd"}]
        bad = os.path.join(d, "bad.yaml")
        with open(bad, "w") as f:
            f.write("".join("---\n" + json.dumps(doc, indent=1) + "\n" for doc in objs))
        r = validate(bad)
        check(r.returncode == 1 and "spec/replicas must be integer" in r.stdout
              and "containerPort must be integer" in r.stdout,
              "a broken StatefulSet fails, naming the fields: %s"
              % [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL")][:1])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return verdict()


if __name__ == "__main__":
    sys.exit(main())
