"""tools/k8s/esd-k8s: the manifests generated from a job file pass a
structural check of the Kubernetes objects they use (the fields the API
server requires, selectors that select their pods' labels, mounts of
declared volumes, huge-page requests equal to limits, names as DNS
labels), say what the job says (shards, workers, trainers per node, the
shards' addresses, the key), and a bad job file is refused naming it.
kubectl's client-side dry run needs an API server for its discovery;
when `kubectl` reaches one it runs too, else the test says it did not.

usage: test_k8s.py
"""
import configparser
import os
import re
import shutil
import subprocess
import sys
import tempfile

from k8s_job import GEN, KEY, SHARDS, TRAINERS, WORKERS, check, docs, generate, verdict

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
KINDS = {"Secret": "v1", "ConfigMap": "v1", "Service": "v1", "StatefulSet": "apps/v1"}

def check_pod(where, pod, sel, claims=()):
    meta, spec = pod["metadata"], pod["spec"]
    check(all(meta["labels"].get(k) == v for k, v in sel.items()),
          "%s: the selector %s selects the pod template's labels" % (where, sel))
    vols = {v["name"] for v in spec.get("volumes", [])} | set(claims)
    names = [c["name"] for c in spec["containers"]]
    check(len(names) == len(set(names)) and all(DNS1123.match(n) for n in names),
          "%s: container names unique DNS labels %s" % (where, names))
    for c in spec["containers"]:
        check(bool(c.get("image")) and isinstance(c.get("command", []), list),
              "%s/%s: image and command" % (where, c["name"]))
        for m in c.get("volumeMounts", []):
            check(m["name"] in vols and m["mountPath"].startswith("/"),
                  "%s/%s: mount %s of a declared volume" % (where, c["name"], m["name"]))
        for p in c.get("ports", []):
            check(isinstance(p["containerPort"], int) and 0 < p["containerPort"] < 65536,
                  "%s/%s: port %s" % (where, c["name"], p))
        res = c.get("resources", {})
        req, lim = res.get("requests", {}), res.get("limits", {})
        for k in req:
            if k.startswith("hugepages-"):
                check(lim.get(k) == req[k] and "memory" in lim,
                      "%s/%s: %s requested = limit, with a memory limit" % (where, c["name"], k))
    return names


def check_objects(objs, shards, workers, trainers, key):
    by = {}
    for o in objs:
        kind = o.get("kind")
        check(KINDS.get(kind) == o.get("apiVersion"), "%s: apiVersion %s"
              % (kind, o.get("apiVersion")))
        md = o["metadata"]
        check(DNS1123.match(md["name"]) is not None and len(md["name"]) <= 63,
              "%s %s: name a DNS label" % (kind, md["name"]))
        by.setdefault(kind, []).append(o)
    sec = by["Secret"][0]
    check(sec["stringData"]["job.key"] == key, "Secret: the job key given")
    ini = configparser.ConfigParser(interpolation=None)
    ini.read_string(by["ConfigMap"][0]["data"]["job.ini"])
    addrs = ini.get("ps", "addrs").split(",")
    check(len(addrs) == shards and all(a.endswith(":7000") for a in addrs),
          "ConfigMap job.ini: ps.addrs names every shard's pod: %s" % addrs)
    check(ini.get("job", "key") == "/etc/esd/key/job.key",
          "ConfigMap job.ini: job.key the Secret's mount")
    svcs = {s["metadata"]["name"]: s for s in by["Service"]}
    for ss in by["StatefulSet"]:
        name, spec = ss["metadata"]["name"], ss["spec"]
        check(spec["serviceName"] in svcs and svcs[spec["serviceName"]]["spec"]["clusterIP"]
              == "None", "%s: its headless Service exists" % name)
        check(svcs[spec["serviceName"]]["spec"]["selector"] == spec["selector"]["matchLabels"],
              "%s: the Service selects its pods" % name)
        ann = spec["template"]["metadata"].get("annotations", {})
        check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port"),
              "%s: prometheus scrape annotations" % name)
        claims = [c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])]
        names = check_pod(name, spec["template"], spec["selector"]["matchLabels"], claims)
        if name.endswith("-ps"):
            check(spec["replicas"] == shards, "%s: %d shards" % (name, shards))
            check(spec["volumeClaimTemplates"][0]["metadata"]["name"] == "ckpt",
                  "%s: a checkpoint volume per shard" % name)
        else:
            check(spec["replicas"] == workers, "%s: %d node pods" % (name, workers))
            check(sum(n.startswith("trainer-") for n in names) == trainers,
                  "%s: %d trainers beside esdd" % (name, trainers))
            aff = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
            check(aff["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"]
                  == "kubernetes.io/hostname", "%s: one node pod per machine" % name)
            vols = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
            check(vols["hugepages"]["emptyDir"]["medium"] == "HugePages-2Mi"
                  and vols["node"]["emptyDir"]["medium"] == "Memory",
                  "%s: huge pages and the shared node volume" % name)


def main():
    d = tempfile.mkdtemp(prefix="esd-k8s.")
    try:
        out = generate(d)
        check(os.stat(out).st_mode & 0o077 == 0, "the manifests (with the key) are mode 0600")
        check_objects(docs(open(out).read()), SHARDS, WORKERS, TRAINERS, KEY)
        bad = os.path.join(d, "bad.ini")
        with open(bad, "w") as f:
            f.write("[workers]\nn = two\n[data]\nstream = /x\n")
        r = subprocess.run([sys.executable, GEN, bad], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 2 and "workers.n" in r.stdout and bad in r.stdout,
              "a bad job file is refused naming the file and the key: %s" % r.stdout.strip())
        kubectl = shutil.which("kubectl")
        up = kubectl and subprocess.run([kubectl, "version", "--request-timeout=3s"],
                                        stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL).returncode == 0
        if up:
            r = subprocess.run([kubectl, "apply", "--dry-run=client", "-f", out],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            check(r.returncode == 0, "kubectl apply --dry-run=client: %s" % r.stdout.strip())
        else:
            print("note: kubectl's client-side dry run not run: %s" %
                  ("no kubectl" if not kubectl else "no API server reachable (its "
                   "discovery needs one)"))
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return verdict()


if __name__ == "__main__":
    sys.exit(main())
