"""Tables larger than memory (ps.store_dir): one PS shard whose table is four
times its memory limit trains exactly as in RAM.

The shard runs in a memory cgroup of its own (cgroup v2 memory.max, or v1
memory.limit_in_bytes) limited to a quarter of the table's bytes, with
ps.store_ram an eighth of the table; 4 node daemons and trainers outside
it. The row file is on the disk under the test's temporary folder; the
run is bound by that disk's random reads. Checks: the shard is not OOM-killed and ends the job; its peak resident
set and the cgroup's peak stay under the limit; the final tables are bit
for bit those of the same job with the rows in RAM, and equal esd-ref's
single-process reference.

Run by hand in a sanitizer build (ESD_SANITIZED=1; ctest runs it in the
normal tree only, test_disk_store runs the row store in the sanitizer
tree), the shard's AddressSanitizer runtime (shadow memory, quarantine,
redzones) is charged to the cgroup too:
the shard runs with a 16 MiB quarantine and the limit is a quarter of the
table plus SANITIZER_SLACK, said in the output; the checks are the same.

Exits 77 when no memory cgroup can be created here (not root, no memory
controller).

usage: test_bigtable.py BIN_DIR
"""
import os
import re
import subprocess
import sys
import threading
import time

from e2e_util import Env, ClusterError, shard_files
from esdcluster import Cluster

DIM = 1024
ITERS = 40
SAMPLES = 10240
SANITIZED = os.environ.get("ESD_SANITIZED") == "1"
SANITIZER_SLACK = 160 << 20  # the sanitizer runtime's own memory, bytes


def row_bytes(dim):
    """A stored record: key, clock and value (SGD keeps no state), in
    64-byte units (runtime/ps/store.c)."""
    b = 16 + dim * 4
    return (b + 63) & ~63


class MemCgroup:
    """A child memory cgroup for one process: (limit file, peak file,
    procs file) under v2 or v1; None when neither can be made."""

    def __init__(self, name, limit):
        self.path = None
        v2 = "/sys/fs/cgroup"
        v1 = "/sys/fs/cgroup/memory"
        try:
            if os.path.exists(os.path.join(v2, "cgroup.controllers")):
                with open(os.path.join(v2, "cgroup.controllers")) as f:
                    if "memory" not in f.read().split():
                        return
                self.path = os.path.join(v2, name)
                os.mkdir(self.path)
                self._write("memory.max", limit)
                self._write("memory.swap.max", 0) if self._has("memory.swap.max") else None
                self.peak_file, self.oom_file = "memory.peak", "memory.events"
            elif os.path.isdir(v1):
                self.path = os.path.join(v1, name)
                os.mkdir(self.path)
                self._write("memory.limit_in_bytes", limit)
                self.peak_file, self.oom_file = "memory.max_usage_in_bytes", "memory.oom_control"
            else:
                return
        except OSError as e:
            print("no memory cgroup: %s" % e)
            self.remove()
            self.path = None

    def _has(self, f):
        return os.path.exists(os.path.join(self.path, f))

    def _write(self, f, v):
        with open(os.path.join(self.path, f), "w") as fh:
            fh.write(str(v))

    def read(self, f):
        with open(os.path.join(self.path, f)) as fh:
            return fh.read()

    def wrap(self, name):
        """argv prefix: the process joins the cgroup, then execs."""
        procs = os.path.join(self.path, "cgroup.procs")
        asan = ("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16 "
                if SANITIZED else "")
        return ["sh", "-c", 'echo $$ > %s && %sexec "$0" "$@"' % (procs, asan)]

    def peak(self):
        return int(self.read(self.peak_file).split()[-1]) if self._has(self.peak_file) else -1

    def oom_kills(self):
        for line in self.read(self.oom_file).splitlines():
            k, _, v = line.partition(" ")
            if k == "oom_kill":
                return int(v)
        return 0

    def remove(self):
        if self.path and os.path.isdir(self.path):
            for _ in range(50):
                try:
                    os.rmdir(self.path)
                    return
                except OSError:
                    time.sleep(0.1)


class PeakRss:
    """Polls a process's VmHWM (peak resident set) until it exits."""

    def __init__(self, proc):
        self.proc, self.hwm, self.stop = proc, 0, False
        self.t = threading.Thread(target=self._poll, daemon=True)
        self.t.start()

    def _poll(self):
        path = "/proc/%d/status" % self.proc.pid
        while not self.stop and self.proc.poll() is None:
            try:
                with open(path) as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            self.hwm = max(self.hwm, int(line.split()[1]) * 1024)
            except OSError:
                break
            time.sleep(0.05)

    def end(self):
        self.stop = True
        self.t.join(timeout=5)
        return self.hwm


def main():
    env = Env(sys.argv[1], "bigtable")
    subprocess.run([os.path.join(env.bin, "esd-data"), "gen", "-o", env.stream,
                    "--shape", "criteo-kaggle", "-n", str(SAMPLES), "--scale", "1",
                    "--max-rows", "4000000", "--zipf", "0.9", "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL)
    s = env.settings(**{"model.dim": DIM, "job.iterations": ITERS, "workers.batch": 64,
                        "cache.ratio": 0.001, "job.force_plan": "true",
                        "model.optimizer": "sgd"})
    # about 77,000 rows of 4,160 bytes (dim 1024, SGD): a 306 MiB table; a
    # long tail of rows met once or twice, as a large sparse table has (its
    # tables declared past what plan lets a shard hold in RAM here:
    # job.force_plan; the rows are created as met). SGD: with Adagrad the
    # first step of an element is +-lr whatever the gradient's size, so a
    # near-zero gradient whose sign the workers' float partial sums flip
    # differs from esd-ref by lr, beyond compare's tolerance at this dim.
    try:
        ck_ram, _ = env.run("ram", dict(s), timeout=600)
        rows = None
        with open(os.path.join(env.root, "ram", "ps0.log")) as f:
            for line in f:
                m = re.search(r"checkpoint of iteration %d: full of (\d+) rows" % ITERS, line)
                if m:
                    rows = int(m.group(1))
        table = rows * row_bytes(DIM)
        limit = table // 4 + (SANITIZER_SLACK if SANITIZED else 0)
        print("table: %d rows x %d bytes = %.1f MiB; shard memory limit %.1f MiB%s"
              % (rows, row_bytes(DIM), table / 2**20, limit / 2**20,
                 " (a quarter of the table + %d MiB for the sanitizer runtime)"
                 % (SANITIZER_SLACK >> 20) if SANITIZED else ""), flush=True)
        cg = MemCgroup("esd-bigtable-%d" % os.getpid(), limit)
        if not cg.path:
            print("SKIP: cannot create a memory cgroup here (needs root and the memory "
                  "controller)")
            return 77
        try:
            sd = dict(s)
            work, ck = env.run_dirs(sd, "disk")
            store = os.path.join(work, "rows")
            os.makedirs(store)
            sd["ps.store_dir"] = store
            sd["ps.store_ram"] = max(1, table // 8 // 2**20)
            with Cluster(env.bin, work, sd, wrap=lambda n: cg.wrap(n) if n == "ps0" else [],
                         shards=1) as c:
                c.start()
                rss = PeakRss(c.procs["ps0"])
                c.wait(timeout=600)
                c.procs["ps0"].wait(timeout=60)
                hwm = rss.end()
                ps_rc = c.procs["ps0"].returncode
            peak, ooms = cg.peak(), cg.oom_kills()
        finally:
            cg.remove()
        print("shard: peak RSS %.1f MiB, cgroup peak %.1f MiB, limit %.1f MiB, table "
              "%.1f MiB, OOM kills %d" % (hwm / 2**20, peak / 2**20, limit / 2**20,
                                          table / 2**20, ooms), flush=True)
        env.check(ps_rc == 0 and ooms == 0, "the shard ends the job under its memory limit "
                  "(exit %s, %d OOM kills)" % (ps_rc, ooms))
        env.check(0 < hwm <= limit and peak <= limit,
                  "peak RSS %.1f MiB and cgroup peak %.1f MiB <= limit %.1f MiB (a quarter "
                  "of the table%s)" % (hwm / 2**20, peak / 2**20, limit / 2**20,
                                     " + the sanitizer's" if SANITIZED else ""))
        ck_disk = shard_files(ck, 1)
        ok, out = env.compare(ck_ram, ck_disk, exact=True)
        env.check(ok, "rows on disk: final tables bit-identical to the rows in RAM: %s"
                  % (out.splitlines()[-1] if out else ""))
        ref = env.reference("bigtable", s)
        ok, out = env.compare(ck_disk, ref)
        env.check(ok, "rows on disk: final tables == single-process reference: %s"
                  % (out.splitlines()[-1] if out else ""))
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
