#!/usr/bin/python3
"""esd.torch's end of a trainer's gloo group (Session.close): 4 processes
of one group (a file store, no daemon needed) train a DistributedDataParallel
model with the share-order sum, then leave through _bounded_teardown.

- every process exits 0 after the last barrier, the group left
  (dist.is_initialized() is False) and gloo's teardown never run (its
  destructor holds the GIL while it waits for gloo's threads): repeated,
  as the wait it avoids comes once in a while (three runs, the third's
  other processes beside the one below);
- a process whose exit then hangs (an atexit handler that never returns)
  is ended within the bound, exit status 1, with every thread's stack on
  stderr naming where it waited.

The bounds are wall-clock times on a machine that may be loaded many
times over: a clean exit is the interpreter's end, CPU work that such a
machine stretches to tens of seconds, so its bound (EXIT_S) is wide: the
wait it guards against never ends. The hanging exit sleeps, so its bound
(HANG_S) is met whatever the load. A run that passes RUN_S has every
process's stacks printed (SIGUSR1), then is killed.

Usage: test_torch_teardown.py (the child: --rank R --store PATH [--hang])."""
import faulthandler
import signal

# first: a process the parent gives up on prints its stacks, even one still importing
faulthandler.register(signal.SIGUSR1, all_threads=True)

import argparse  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import torch_needed  # noqa: E402,F401 - exits 77 without torch

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "runtime", "python"))
import esd.torch as et  # noqa: E402

WORLD = 4
EXIT_S = 60       # the teardown's bound on a process that leaves cleanly
HANG_S = 10       # the teardown's bound on the process whose exit hangs
RUN_S = 240       # the test's own bound on a run, from its processes' start
REPEAT = 3        # runs checked for a clean exit, the last with a process that hangs
LEFT = "left the group (initialized: False)"


def hang_at_exit():
    while True:
        time.sleep(1)


def child(a):
    torch.set_num_threads(1)
    # a process may start far behind the others on a loaded machine: the
    # group waits for it as long as the run may last
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=a.rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=RUN_S))
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 8),
                                                        torch.nn.Linear(8, 1)))
    model.register_comm_hook(None, et._ordered_sum_hook)
    for _ in range(3):
        model(torch.randn(4, 16)).sum().backward()
        parts = [torch.empty(1, dtype=torch.float64) for _ in range(WORLD)]
        dist.all_gather(parts, torch.ones(1, dtype=torch.float64))
    if a.hang:
        import atexit
        atexit.register(hang_at_exit)  # runs after the teardown's own handler
    et._bounded_teardown(HANG_S if a.hang else EXIT_S)
    print("rank %d left the group (initialized: %s)" % (a.rank, dist.is_initialized()),
          flush=True)
    return 0  # model (DDP, holding the group) is freed here, then the interpreter ends


class Proc:
    """One process of a run, its output read by a thread of its own: when
    its line saying it left came, and when it ended, each as it happened."""

    def __init__(self, argv):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        self.lines, self.left, self.end = [], None, None
        self.th = threading.Thread(target=self._read, daemon=True)
        self.th.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line)
            if LEFT in line and self.left is None:
                self.left = time.monotonic()
        self.p.wait()
        self.end = time.monotonic()

    def stop(self):
        """Past the run's bound: its stacks, then the kill."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGUSR1)
            self.th.join(5)
            self.p.kill()
        self.th.join()
        self.lines.append("\n(still running after %d s: stacks asked for, killed)\n" % RUN_S)

    def text(self):
        return "".join(self.lines)


def run(work, i, hang):
    """Start the 4 processes; returns them ended (rc, left, end, text())."""
    store = os.path.join(work, "store.%d" % i)  # a fresh file store for each run
    procs = [Proc([sys.executable, __file__, "--rank", str(r), "--store", store]
                  + (["--hang"] if hang and r == 1 else []))
             for r in range(WORLD)]
    deadline = time.monotonic() + RUN_S
    for p in procs:
        p.th.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.th.is_alive():
            p.stop()
    return procs


failures = []


def check(ok, what):
    print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
    if not ok:
        failures.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int)
    ap.add_argument("--store")
    ap.add_argument("--hang", action="store_true")
    a = ap.parse_args()
    if a.rank is not None:
        return child(a)
    work = tempfile.mkdtemp(prefix="esd-torch-teardown.")
    try:
        for i in range(REPEAT):
            hang = i == REPEAT - 1
            procs = run(work, i, hang)
            clean = procs[:1] + procs[2:] if hang else procs
            ok = all(p.p.returncode == 0 and LEFT in p.text() for p in clean)
            ends = [p.end for p in clean]
            exits = [p.end - p.left for p in clean if p.left is not None]
            check(ok and max(ends) - min(ends) < EXIT_S,
                  "run %d: every trainer%s left its group and exited 0 (statuses %s, the "
                  "last %.1f s after the first, the longest exit %.1f s)"
                  % (i + 1, " but the hanging one" if hang else "",
                     [p.p.returncode for p in clean], max(ends) - min(ends),
                     max(exits, default=float("nan"))))
            for p in clean:
                if p.p.returncode != 0 or LEFT not in p.text():
                    print(p.text())
        h = procs[1]
        late = h.end - h.left if h.left is not None else float("nan")
        rc, text = h.p.returncode, h.text()
        check(rc == 1 and "hang_at_exit" in text and "Timeout" in text
              and late < HANG_S + 20,
              "a trainer whose exit hangs ends %.1f s after it left its group, status %s, "
              "its stacks naming the wait" % (late, rc))
        if rc != 1 or "hang_at_exit" not in text:
            print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
