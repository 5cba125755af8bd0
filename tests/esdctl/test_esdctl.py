#!/usr/bin/env python3
"""esdctl against a real running job: esd-ps, two esdd and two emulated
trainers started by tools/testbed/esdcluster.py (stopped by PID, also on
failure). Checks every subcommand, its --json output parsed back, the
one-line error when no daemon answers, the plan against the real cache
region's size, and the metrics as Prometheus text, printed and fetched over
HTTP from a port on 127.0.0.1.

usage: test_esdctl.py BIN_DIR SRC_DIR
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BIN, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "tools", "testbed"))
from esdcluster import Cluster, make_key, write_ini  # noqa: E402

ESDCTL = os.path.join(BIN, "esdctl")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def esdctl(*args, timeout=30):
    r = subprocess.run([ESDCTL, "--timeout", "10000"] + list(args), capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def esdctl_json(*args):
    rc, out, err = esdctl("--json", *args)
    if not check(rc == 0, "esdctl --json %s: rc %d, stderr %s" % (" ".join(args), rc, err)):
        return None
    return json.loads(out)


# ---- Prometheus text format (exposition format 0.0.4) ---------------------
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*"'
SAMPLE = re.compile(r"^(%s)(\{(?:%s)(?:,%s)*\})? (\S+)$" % (NAME, LABEL, LABEL))


def parse_prometheus(text):
    """Returns {family: {"type", "help", "samples": [(labels dict, value)]}};
    fails the test on any line the format does not allow."""
    fams, cur, seen_type = {}, None, set()
    for ln, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            name, _, help_ = line[7:].partition(" ")
            check(name not in fams, "metrics line %d: HELP for %s twice" % (ln, name))
            fams[name] = {"help": help_, "type": None, "samples": []}
            cur = name
        elif line.startswith("# TYPE "):
            name, _, typ = line[7:].partition(" ")
            check(name == cur and name not in seen_type,
                  "metrics line %d: TYPE %s not right after its HELP" % (ln, name))
            check(typ in ("counter", "gauge"), "metrics line %d: type %s" % (ln, typ))
            seen_type.add(name)
            fams[name]["type"] = typ
        elif line.startswith("#") or not line:
            check(False, "metrics line %d: unexpected %r" % (ln, line))
        else:
            m = SAMPLE.match(line)
            if not check(m, "metrics line %d: not a sample: %r" % (ln, line)):
                continue
            name = m.group(1)
            check(name == cur, "metrics line %d: %s outside its family" % (ln, name))
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                     m.group(2) or ""))
            value = float(m.group(3))
            if fams[cur]["type"] == "counter":
                check(name.endswith("_total") and value >= 0,
                      "metrics line %d: counter %s" % (ln, name))
            fams[cur]["samples"].append((labels, value))
    return fams


def value_of(fams, name, **labels):
    for lab, v in fams.get(name, {}).get("samples", []):
        if all(lab.get(k) == str(x) for k, x in labels.items()):
            return v
    return None


def dump_logs(cwork):
    for name in sorted(os.listdir(cwork)):
        if name.endswith(".log"):
            with open(os.path.join(cwork, name), errors="replace") as f:
                tail = f.read()[-2000:]
            print("---- %s (last 2000 bytes)\n%s" % (name, tail))


OWN = ("runtime/node/ctl.c", "runtime/node/report.c", "runtime/ps/main.c", "tools/esdctl/", "runtime/ctl/")


def sanitizer_skip(cwork):
    """A process of the job died of a sanitizer report in code this test
    does not cover (sanitizer tree only): skip, naming it. A report in the
    control-socket code under test fails instead."""
    for name in sorted(os.listdir(cwork)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(cwork, name), errors="replace") as f:
            for line in f:
                m = re.search(r"(\S+\.c):\d+:\d+: runtime error|ERROR: AddressSanitizer", line)
                if m and not any(o in line for o in OWN):
                    print("SKIP: the job cannot run in this build: %s: %s"
                          % (name, line.strip()))
                    sys.exit(77)


def start(c):
    """Cluster.start(), but each trainer starts only once its esdd answers on
    its control socket: esdd opens that socket after the trainer socket is
    listening, whereas esdd.sock exists from bind(2) on and a trainer that
    connects between bind and listen is refused and exits (seen under the
    sanitizers)."""
    c.settings["ps.shards"] = c.shards
    # a key, as Cluster.start() makes one
    os.makedirs(c.work, exist_ok=True)
    c.settings.setdefault("job.key", make_key(os.path.join(c.work, "job.key")))
    write_ini(c.job, c.settings)
    c.ps_addr = [c.start_ps(s) for s in range(c.shards)]
    for w in range(c.n):
        c.start_daemon(w)
    for w in range(c.n):
        t0 = time.time()
        while True:
            p = c.procs["esdd%d" % w]
            if p.poll() is not None:
                sanitizer_skip(c.work)
                raise RuntimeError("esdd%d exited with %d" % (w, p.returncode))
            if p.poll() is None and c.procs["ps0"].poll() is not None:
                sanitizer_skip(c.work)
            rc, _, _ = esdctl("--node", c.node_dir(w), "status")
            if rc == 0:
                break
            if time.time() - t0 > 30:
                raise RuntimeError("esdd%d does not answer on its control socket" % w)
            time.sleep(0.05)
        c.start_trainer(w)


def main():
    work = tempfile.mkdtemp(prefix="esdctl-test-")
    try:
        run(work)
    except Exception:
        if os.path.isdir(os.path.join(work, "job")):
            dump_logs(os.path.join(work, "job"))
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True) if not os.environ.get("ESDCTL_TEST_KEEP") else print("kept", work)
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("all esdctl checks passed")


def run(work):
    stream = os.path.join(work, "s.esd")
    subprocess.run([os.path.join(BIN, "esd-data"), "gen", "-o", stream, "--shape",
                    "criteo-kaggle", "-n", "4000", "--scale", "1000", "--max-rows", "2000"],
                   check=True, capture_output=True, timeout=60)

    # ---- no daemon: one line naming the socket and how to start one ------
    ghost = os.path.join(work, "no-such-node")
    rc, out, err = esdctl("--node", ghost, "status")
    check(rc == 3, "no daemon: exit status 3, got %d" % rc)
    check(err.count("\n") == 1 and ghost + "/control.sock" in err and "esdd --config" in err,
          "no daemon: one line naming the socket and how to start esdd: %r" % err)
    rc, out, err = esdctl("--socket", os.path.join(work, "ps.sock"), "--json", "metrics")
    check(rc == 3 and out == "", "no daemon: metrics exits 3 with nothing on stdout")

    settings = {"workers.n": 2, "workers.batch": 32, "model.dim": 8, "model.hidden": 8,
                "job.iterations": 100000, "data.stream": stream, "cache.ratio": 0.08,
                "dispatch.method": "hybrid", "dispatch.gpu": "true",
                "ps.checkpoint_dir": os.path.join(work, "ck")}
    os.makedirs(settings["ps.checkpoint_dir"])
    cwork = os.path.join(work, "job")

    with Cluster(BIN, cwork, settings, emulate_ns=1000000) as c:
        start(c)
        n0, n1 = c.node_dir(0), c.node_dir(1)
        ps = os.path.join(cwork, "ps0.sock")
        every = ["--node", n0, "--node", n1, "--socket", ps]

        # ---- plan (before looking at the running job) ------------------
        plan = esdctl_json("plan", c.job)
        check(plan["workers"] == 2 and plan["shards"] == 1 and plan["tables"] == 26,
              "plan: job shape")
        check(plan["fits"] is True and plan["total_bytes"] > 0, "plan: fits this machine")
        node_plan = plan["esdd"]["nodes"][0]
        parts = sum(node_plan[k]["bytes"] for k in
                    ("cache_region", "snapshots", "exchange", "queues", "dispatcher"))
        check(parts == node_plan["total"], "plan: esdd parts sum to its total")
        check(plan["total_bytes"] == plan["esd_ps"]["total"] + plan["esdd"]["total"] +
              plan["trainers"]["total"], "plan: processes sum to the total")
        rc, out, err = esdctl("plan", c.job)
        check(rc == 0 and "esd-ps shard 0" in out and "cache_region" in out and "fits" in out,
              "plan: human table")
        big = esdctl_json("plan", "--set", "cache.rows=100000000", "--set", "model.dim=512",
                          c.job)
        check(big["fits"] is False and big["needed_from_mem_available"] >
              big["mem_available_bytes"], "plan: a job too big for this machine")
        # model.dims: rows sized at the largest, the model's input the sum
        dims = esdctl_json("plan", "--set", "model.dims=4*13,32*13", "--set", "model.dim=32",
                           c.job)
        check(dims["dim"] == 32 and dims["emb_floats"] == 13 * 36 and
              plan["emb_floats"] == 26 * plan["dim"], "plan: model.dims sizes rows at the "
              "largest dim and the model's input at their sum")
        per = 1 + {"sgd": 0, "adagrad": 1, "adam": 2}[dims["optimizer"]]
        check(dims["wire_row_bytes"] == [16 + 16 * per] * 13 + [16 + 128 * per] * 13 and
              plan["wire_row_bytes"] == [16 + 4 * plan["dim"] * per] * 26,
              "plan: a row on the links is its table's bytes: %s" % dims["wire_row_bytes"][12:14])
        rc, out, err = esdctl("plan", "--set", "model.dims=4,8", "--set", "model.dim=8", c.job)
        check(rc != 0 and "model.dims lists 2 dims but the stream has 26 tables" in out + err,
              "plan: model.dims of another table count is refused: %s" % (out + err).strip())
        ps_plan = plan["esd_ps"]["shards"][0]
        check(sum(ps_plan[k]["bytes"] for k in ("rows", "index", "staging", "pull", "dense")) ==
              ps_plan["total"] and ps_plan["disk"] == 0, "plan: esd-ps parts sum to its total")
        # rows on disk: RAM is ps.store_ram plus the per-iteration buffers
        disk = esdctl_json("plan", "--set", "ps.store_dir=" + work, "--set", "ps.store_ram=8",
                           c.job)
        dps = disk["esd_ps"]["shards"][0] if disk else {}
        sf = {"sgd": 0, "adagrad": 1, "adam": 2}[disk["optimizer"]] if disk else 0
        wire = 16 + 4 * disk["dim"] * (1 + sf) if disk else None
        check(disk and dps["rows"]["bytes"] == min(6 << 20, dps["disk"]) +
              min(2 << 20, dps["disk"]) and
              dps["disk"] == ps_plan["rows"]["bytes"] and
              dps["pull"]["bytes"] == ps_plan["pull"]["bytes"] > 0 and
              dps["staging"]["bytes"] == ps_plan["staging"]["bytes"] and
              dps["total"] == sum(dps[k]["bytes"] for k in
                                  ("rows", "index", "staging", "pull", "dense")),
              "plan: a disk-store shard is store_ram + index + staging + pull answers + dense "
              "in RAM, its records on disk: %s" % {k: dps.get(k) for k in ("total", "disk")})
        if wire:
            check(dps["pull"]["bytes"] % wire == 0, "plan: pull answers in whole rows with state")
        rc, out, err = esdctl("plan", "--set", "ps.store_dir=" + work, "--set", "ps.store_ram=8",
                              c.job)
        check(rc == 0 and "row file in ps.store_dir" in out and "pull" in out,
              "plan: human table of a disk-store shard")
        rc, out, err = esdctl("plan", os.path.join(work, "missing.ini"))
        check(rc == 2 and "missing.ini" in err, "plan: a missing job file is named")

        # ---- wait for a few iterations ---------------------------------
        t0 = time.time()
        st = None
        while time.time() - t0 < 40:
            rc, out, err = esdctl("--json", "--node", n0, "status")
            if rc == 0:
                st = json.loads(out)
                if st["iteration"] >= 3:
                    break
            time.sleep(0.2)
        if not check(st and st["iteration"] >= 3, "the job reached iteration 3 in 40 s"):
            dump_logs(cwork)
            return

        # ---- status --------------------------------------------------
        sts = esdctl_json(*every, "status")
        check(isinstance(sts, list) and len(sts) == 3, "status: one reply per target")
        roles = sorted((s["role"], s.get("rank", s.get("shard"))) for s in sts)
        check(roles == [("esdd", 0), ("esdd", 1), ("ps", 0)], "status: roles %r" % roles)
        for s in sts:
            check(s["iteration"] >= 1 and s["workers"] == 2, "status: iteration, workers")
            if s["role"] == "esdd":
                check(s["method"] == "hybrid" and s["trainer_attached"] is True,
                      "status: method and trainer")
            else:
                check(s["connected"] == 2 and s["failed"] is None, "status: ps connected")
        rc, out, err = esdctl(*every, "status")
        check(rc == 0 and "ITERATION" in out and "esd-ps" in out, "status: human table")
        rc, out, err = esdctl("--node", n1, "status", "--json")
        check(rc == 0 and json.loads(out)["rank"] == 1, "status --json after the command")

        # ---- links ---------------------------------------------------
        ln = esdctl_json("--node", n0, "links")
        l0 = ln["links"][0]
        check(l0["shard"] == 0 and l0["backend"] == "tcp", "links: shard and backend")
        check(l0["miss_pull"]["rx_rows"] > 0 and l0["other"]["tx_rows"] > 0,
              "links: rows per kind")
        lall = esdctl_json(*every, "links")
        check(isinstance(lall, list) and len(lall) == 2, "links: the PS is skipped")
        rc, out, err = esdctl("--node", n0, "links")
        check(rc == 0 and "miss_pull" in out and "evict_push" in out, "links: human table")
        rc, out, err = esdctl("--socket", ps, "links")
        check(rc == 2 and "esdd" in err, "links on the PS: says it is an esdd command")

        # ---- cache: the real region's size against the plan ------------
        ca = esdctl_json("--node", n0, "cache")
        check(ca["bytes"] == node_plan["cache_region"]["bytes"],
              "plan: cache region %d bytes, the running region has %d"
              % (node_plan["cache_region"]["bytes"], ca["bytes"]))
        check(ca["capacity_rows"] == plan["cache_rows"], "plan: cache rows")
        check(ca["tables"] == 26 and len(ca["per_table"]) >= 26, "cache: per-table rows")
        for k in ("hits", "miss_absent", "miss_outdated", "evict_clean", "evict_dirty"):
            check(sum(t[k] for t in ca["per_table"]) == ca[k], "cache: tables sum to %s" % k)
        need = ca["hits"] + ca["miss_absent"] + ca["miss_outdated"]
        check(need > 0 and abs(ca["hit_ratio"] - ca["hits"] / need) < 1e-9,
              "cache: hit ratio")
        check(0 < ca["rows_used"] <= ca["capacity_rows"], "cache: occupancy")
        rc, out, err = esdctl("--node", n0, "--node", n1, "cache")
        check(rc == 0 and out.count("HIT_RATIO") == 2, "cache: human table per node")

        # ---- dispatch ------------------------------------------------
        # node 0 decides for every node (docs/design.md §5, One decider)
        d1 = esdctl_json("--node", n1, "dispatch")
        check(d1["decided_by"] == "node 0" and d1["steps"] == 0,
              "dispatch: node 1 follows node 0's orders: %s" % d1.get("decided_by"))
        d = esdctl_json("--node", n0, "dispatch")
        check(d["method"] == "hybrid" and d["steps"] >= 3 and d["decided_by"] == "this node",
              "dispatch: method and steps")
        check(d["decision_ms_mean"] > 0 and "regret_median" in d and "heu_opt_gap" in d,
              "dispatch: decision time, regret, gap")
        rc, out, err = esdctl("--node", n0, "dispatch")
        check(rc == 0 and "REGRET_MED" in out and "hybrid" in out, "dispatch: human table")
        g = d.get("gpu") or {}
        check(g.get("gpu_solved", 0) + g.get("cpu_fallbacks", 0) >= 3,
              "dispatch: GPU solver counters (dispatch.gpu): %s" % g)
        check("GPU_SOLVED" in out and "CPU_FALLBACK" in out, "dispatch: GPU counters shown")

        # ---- set -----------------------------------------------------
        rc, out, err = esdctl(*every, "set", "link.rate", "5G")
        check(rc == 0, "set link.rate on both nodes: %s" % err)
        for nd in (n0, n1):
            r = esdctl_json("--node", nd, "links")
            check(r["links"][0]["rate_bps"] == 5000000000, "set: link.rate took effect")
        r = esdctl_json("--node", n0, "set", "link.rate", "0")
        check(r["rate_bps"] == 0 and r["live"] is True, "set --json: reply parsed back")
        for key, val in (("cache.policy", "lru"), ("dispatch.method", "heu"),
                         ("dispatch.alpha", "0.5"), ("method", "opt"), ("alpha", "1")):
            rc, out, err = esdctl("--node", n0, "set", key, val)
            check(rc == 1 and "same iteration" in err and "restart" in err,
                  "set %s: refused with the reason: %r" % (key, err))
        rc, out, err = esdctl("--node", n0, "set", "no.such", "1")
        check(rc == 1 and "link.rate" in err, "set: an unknown key lists what is live")
        rc, out, err = esdctl("--node", n0, "set", "link.rate", "fast")
        check(rc == 1 and "bit rate" in err, "set: a bad rate is refused")
        st = esdctl_json("--node", n0, "status")
        check(st["policy"] == "emark" and st["method"] == "hybrid", "set: nothing changed")

        # ---- every node through shard 0 ------------------------------
        rc, out, err = esdctl("--socket", ps, "--worker", "1", "set", "link.rate", "123M")
        check(rc == 0 and "link.rate = 123M" in out, "relay set: %s%s" % (out, err))
        r = esdctl_json("--socket", ps, "--worker", "1", "status")
        check(r.get("role") == "esdd" and r.get("rank") == 1,
              "relay status: node 1 answers through shard 0 (%s)"
              % {k: r.get(k) for k in ("role", "rank")})
        rc, out, err = esdctl("--socket", ps, "--worker", "0", "cache")
        check(rc == 0 and "HIT" in out.upper(), "relay cache: node 0's table through shard 0")
        rc, out, err = esdctl("--socket", ps, "--worker", "7", "status")
        check(rc == 1 and "worker" in err, "relay to a rank the job lacks is refused: %r" % err)
        t0, rate = time.time(), None
        while time.time() - t0 < 10 and rate != 123000000:
            rate = esdctl_json("--node", n1, "links")["links"][0]["rate_bps"]
            time.sleep(0.05)
        check(rate == 123000000, "relay: node 1's links shaped at 123M (%s)" % rate)
        esdctl("--node", n1, "set", "link.rate", "0")
        t0, nodes = time.time(), []
        while time.time() - t0 < 10 and not (len(nodes) == 2 and  # a report a second
                                            all(n.get("trainers") == 1 for n in nodes)):
            nodes = esdctl_json("--socket", ps, "status").get("nodes", [])
            time.sleep(0.1)
        check(len(nodes) == 2 and all(n.get("trainers") == 1 and n.get("pid") for n in nodes),
              "status on shard 0 lists both nodes: %s" % nodes)
        rc, out, err = esdctl("--socket", ps, "status")
        check("TRAINERS" in out and "HOST" in out, "status on shard 0: a table of the nodes")

        # ---- top: the whole job through shard 0, as rates ------------
        rc, out, err = esdctl("--socket", ps, "--json", "top", "--interval", "1.2",
                              "--count", "3")
        frames = [json.loads(l) for l in out.splitlines() if l.strip()]
        check(rc == 0 and len(frames) == 3, "top --json: 3 frames (%d, %s)" % (rc, err))
        last = frames[-1]
        check(len(last["nodes"]) == 2 and len(last["shards"]) == 1,
              "top: both nodes and the shard (%s)" % last)
        for n in last["nodes"]:
            check(n["connected"] and n["iters_per_s"] > 0 and n["cpu_ms_per_iter"] > 0 and
                  n["tx_bytes_per_s"] > 0 and 0 <= n["hit_ratio"] <= 1 and
                  n["trainers"] == 1, "top: node %d's rates are live: %s" % (n["rank"], n))
            ph = n.get("cpu_ms_per_iter_by_phase", {})
            check(ph.get("decision_ms", 0) > 0 and "auth_ms" in ph and "optimizer_ms" in ph,
                  "top: node %d's CPU per iteration by phase: %s" % (n["rank"], ph))
        check(last["shards"][0]["iters_per_s"] > 0 and last["shards"][0]["cpu_ms_per_iter"] > 0,
              "top: the shard's rates: %s" % last["shards"][0])
        rc, out, err = esdctl("--socket", ps, "top", "--interval", "0.5", "--count", "2")
        check(rc == 0 and out.count("esdctl top: iteration") == 2 and "by phase" in out
              and "\x1b[" not in out, "top: 2 tables, no escape codes off a terminal: %r" % out)
        rc, out, err = esdctl("--node", n0, "top", "--count", "1")
        check(rc == 2 and "shard 0" in err, "top on a node's socket: says to use shard 0: %r" % err)
        rc, out, err = esdctl("--socket", ps, "top", "--interval", "0")
        check(rc == 2 and "--interval" in err, "top: a bad interval is refused: %r" % err)

        # ---- checkpoint ----------------------------------------------
        before = esdctl_json("--socket", ps, "status")["checkpoints"]
        ck = esdctl_json("--socket", ps, "checkpoint")
        check(ck["requested"] is True and ck["path"].endswith("ps-shard0.ckpt"),
              "checkpoint: requested")
        s = esdctl_json("--socket", ps, "status")
        # the barrier may already have written it between the two calls
        check(s["checkpoint_requested"] is True or s["checkpoints"] > before,
              "checkpoint: the PS shows the request, or has written it (%s, %d -> %d)"
              % (s["checkpoint_requested"], before, s["checkpoints"]))
        rc, out, err = esdctl("--node", n0, "checkpoint")
        check(rc == 2 and "esd-ps" in err, "checkpoint on a node: says it is a PS command")

        # ---- metrics, printed ----------------------------------------
        ghost_sock = os.path.join(work, "gone.sock")
        rc, out, err = esdctl(*every, "metrics")
        check(rc == 0, "metrics: rc %d %s" % (rc, err))
        fams = parse_prometheus(out)
        check(value_of(fams, "esd_up", role="esdd") == 1 and
              value_of(fams, "esd_up", role="ps") == 1, "metrics: esd_up")
        check(value_of(fams, "esd_cache_bytes", rank=0) == ca["bytes"],
              "metrics: cache bytes")
        check(value_of(fams, "esd_link_rx_rows_total", rank=0, shard=0,
                       kind="miss_pull") > 0, "metrics: link rows by kind")
        check(value_of(fams, "esd_cache_hits_total", rank=1, table=2) is not None,
              "metrics: per-table cache counters")
        check(value_of(fams, "esd_ps_iteration", shard=0) >= 3, "metrics: ps iteration")
        check(fams["esd_link_tx_bytes_total"]["type"] == "counter" and
              fams["esd_cache_hit_ratio"]["type"] == "gauge", "metrics: types")

        # ---- metrics over HTTP ---------------------------------------
        srv = subprocess.Popen([ESDCTL] + every + ["--socket", ghost_sock, "serve-metrics",
                                                   "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            line = srv.stdout.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
            if check(m, "serve-metrics: prints its address: %r" % line):
                url = "http://127.0.0.1:%s" % m.group(1)
                with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
                    check(r.status == 200 and
                          r.headers["Content-Type"].startswith("text/plain; version=0.0.4"),
                          "serve-metrics: 200 text/plain 0.0.4")
                    body = r.read().decode()
                f2 = parse_prometheus(body)
                check(value_of(f2, "esd_up", role="unknown") == 0,
                      "serve-metrics: a missing daemon is esd_up 0")
                check(value_of(f2, "esd_up", role="esdd") == 1, "serve-metrics: nodes up")
                it1 = value_of(f2, "esd_ps_iteration", shard=0)
                time.sleep(0.5)
                with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
                    it2 = value_of(parse_prometheus(r.read().decode()), "esd_ps_iteration",
                                   shard=0)
                check(it2 is not None and it1 is not None and it2 >= it1,
                      "serve-metrics: each scrape polls again")
                try:
                    urllib.request.urlopen(url + "/nothing", timeout=30)
                    check(False, "serve-metrics: 404 for other paths")
                except urllib.error.HTTPError as e:
                    check(e.code == 404, "serve-metrics: 404 for other paths")
        finally:
            os.kill(srv.pid, signal.SIGTERM)
            try:
                check(srv.wait(timeout=10) == 0, "serve-metrics: exits 0 on SIGTERM")
            except subprocess.TimeoutExpired:
                os.kill(srv.pid, signal.SIGKILL)
                srv.wait()
                check(False, "serve-metrics: stops on SIGTERM")
            srv.stdout.close()
            srv.stderr.close()

    # ---- after the job: nothing answers any more --------------------------
    rc, out, err = esdctl("--node", n0, "status")
    check(rc == 3 and "no daemon answers" in err, "after stop: no daemon, exit 3")


if __name__ == "__main__":
    main()
