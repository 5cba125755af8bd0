#!/usr/bin/env python3
"""`esdctl serve-metrics` against Prometheus' own checker: a small running
job (esd-ps, two esdd, two emulated trainers, started by
tools/testbed/esdcluster.py and stopped by PID, also on failure) is scraped
over HTTP on 127.0.0.1 and the scrape is fed to `promtool check metrics`,
which parses the exposition format and lints the names (base units,
_total on counters only, HELP and TYPE lines). Any complaint fails the
test, and so does a family of tools/esdctl/metrics.c that the scrape lacks,
so that every name is checked.

Exits 77 naming what is missing where promtool is not installed (Debian's
prometheus package; scripts/setup-deps.sh installs it).

usage: test_metrics_promtool.py BIN_DIR SRC_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, "tools", "testbed"))
from esdcluster import Cluster  # noqa: E402

ESDCTL = os.path.join(BIN, "esdctl")
PROMTOOL = shutil.which("promtool")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


def promtool(text):
    """(exit status, everything promtool printed) for text on its stdin."""
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    return r.returncode, (r.stdout + r.stderr).strip()


def families_in_source():
    """{name: type} of every family tools/esdctl/metrics.c can print."""
    with open(os.path.join(SRC, "tools", "esdctl", "metrics.c")) as f:
        src = f.read()
    return dict(re.findall(r'\{"(esd_[a-z_]+)", "(gauge|counter)"', src))


def families_in(text):
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def wait_iterations(node, want, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        r = subprocess.run([ESDCTL, "--timeout", "10000", "--node", node, "--json",
                            "status"], capture_output=True, text=True, timeout=30)
        m = re.search(r'"iteration":\s*(\d+)', r.stdout)
        if r.returncode == 0 and m and int(m.group(1)) >= want:
            return True
        time.sleep(0.1)
    return False


def scrape(every, ghost):
    """One scrape of serve-metrics on a free loopback port; the server is
    stopped by PID before returning."""
    srv = subprocess.Popen([ESDCTL] + every + ["--socket", ghost, "serve-metrics",
                                               "--port", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        line = srv.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        if not check(m, "serve-metrics prints its address: %r" % line):
            return ""
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1),
                                    timeout=30) as r:
            check(r.status == 200, "serve-metrics: HTTP %d" % r.status)
            return r.read().decode()
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait(timeout=10)


def run(work):
    # promtool itself must reject what it is here to reject
    rc, out = promtool("# HELP esd_x_bits_per_second a rate\n"
                       "# TYPE esd_x_bits_per_second gauge\nesd_x_bits_per_second 1\n"
                       "# HELP esd_y_rows rows\n# TYPE esd_y_rows counter\nesd_y_rows 1\n")
    check(rc != 0 and "bytes" in out and "_total" in out,
          "promtool flags a non-base unit and a counter without _total: %d %r" % (rc, out))

    stream = os.path.join(work, "s.esd")
    subprocess.run([os.path.join(BIN, "esd-data"), "gen", "-o", stream, "--shape",
                    "criteo-kaggle", "-n", "4000", "--scale", "1000", "--max-rows", "2000"],
                   check=True, capture_output=True, timeout=60)
    settings = {"workers.n": 2, "workers.batch": 32, "model.dim": 8, "model.hidden": 8,
                "job.iterations": 100000, "data.stream": stream, "cache.ratio": 0.08,
                "dispatch.method": "hybrid", "dispatch.compare": "true",
                "workers.rates": "1G"}
    cwork = os.path.join(work, "job")
    with Cluster(BIN, cwork, settings, emulate_ns=1000000) as c:
        c.start()
        n0, n1 = c.node_dir(0), c.node_dir(1)
        every = ["--node", n0, "--node", n1, "--socket", os.path.join(cwork, "ps0.sock")]
        if not check(wait_iterations(n0, 3, 60) and wait_iterations(n1, 3, 30),
                     "the job reaches iteration 3 within 90 s"):
            return
        text = scrape(every, os.path.join(work, "gone.sock"))
        if not check(text, "a scrape came back"):
            return
        rc, out = promtool(text)
        check(rc == 0 and not out,
              "promtool check metrics on a live scrape: exit %d\n%s" % (rc, out))
        got, want = families_in(text), families_in_source()
        check(len(want) >= 30, "metrics.c's families found: %d" % len(want))
        missing = sorted(set(want) - set(got))
        check(not missing, "families the scrape lacks (unchecked): %s" % missing)
        wrong = sorted(n for n in want if n in got and got[n] != want[n])
        check(not wrong, "families whose TYPE differs from metrics.c: %s" % wrong)
        rates = re.findall(r"^esd_link_rate_bytes_per_second\{[^}]*\} (\S+)$", text, re.M)
        check(rates and all(float(v) == 1e9 / 8 for v in rates),
              "a 1G link's rate is 125000000 bytes per second: %s" % rates)
        print("promtool checked %d families, %d lines" % (len(got), text.count("\n")))


def sanitizer_skip(cwork):
    """In a sanitizer build, a process of the job that died of a report in
    code other than esdctl's skips the test, naming it."""
    for name in sorted(os.listdir(cwork)) if os.path.isdir(cwork) else []:
        if not name.endswith(".log"):
            continue
        with open(os.path.join(cwork, name), errors="replace") as f:
            for line in f:
                if (re.search(r"\.c:\d+:\d+: runtime error|ERROR: AddressSanitizer", line)
                        and "tools/esdctl/" not in line):
                    print("SKIP: the job cannot run in this build: %s: %s"
                          % (name, line.strip()))
                    sys.exit(77)


def main():
    if not PROMTOOL:
        print("SKIP: promtool is not installed (Debian package prometheus; "
              "scripts/setup-deps.sh installs it)")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="esd-promtool-")
    try:
        run(work)
    except Exception:
        cwork = os.path.join(work, "job")
        sanitizer_skip(cwork)
        for name in sorted(os.listdir(cwork)) if os.path.isdir(cwork) else []:
            if name.endswith(".log"):
                with open(os.path.join(cwork, name), errors="replace") as f:
                    print("---- %s\n%s" % (name, f.read()[-2000:]))
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        sys.exit(1)
    print("promtool accepts every metric")


if __name__ == "__main__":
    main()
