#!/usr/bin/python3
"""esd.torch's end of a trainer's gloo group (Session.close): 4 processes
of one group (a file store, no daemon needed) train a DistributedDataParallel
model with the share-order sum, then leave through _bounded_teardown.

- every process exits 0 soon after the last barrier, the group left
  (dist.is_initialized() is False) and gloo's teardown never run (its
  destructor holds the GIL while it waits for gloo's threads): repeated,
  as the wait it avoids comes once in a while (three runs, the third's
  other processes beside the one below);
- a process whose exit then hangs (an atexit handler that never returns)
  is ended within the bound, exit status 1, with every thread's stack on
  stderr naming where it waited.

Usage: test_torch_teardown.py (the child: --rank R --store PATH [--hang])."""
import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

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
LIMIT_S = 10      # the teardown's bound in these runs
WAIT_S = 120      # the test's own bound on a run (the processes' start included)
REPEAT = 3        # runs checked for a clean exit, the last with a process that hangs


def hang_at_exit():
    while True:
        time.sleep(1)


def child(a):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=a.rank,
                            world_size=WORLD, timeout=datetime.timedelta(seconds=60))
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
    et._bounded_teardown(LIMIT_S)
    print("rank %d left the group (initialized: %s)" % (a.rank, dist.is_initialized()),
          flush=True)
    return 0  # model (DDP, holding the group) is freed here, then the interpreter ends


def run(work, hang):
    """Start the 4 processes; returns [(rc, seconds after the first ended, output)]."""
    store = os.path.join(work, "store")
    if os.path.exists(store):
        os.remove(store)
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--store", store]
                              + (["--hang"] if hang and r == 1 else []),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    out = []
    try:
        for p in procs:
            try:
                text, _ = p.communicate(timeout=WAIT_S)
            except subprocess.TimeoutExpired:  # reported as a failed check
                p.kill()
                text, _ = p.communicate()
                text += "\n(still running after %d s: killed)" % WAIT_S
            out.append((p.returncode, time.time(), text))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    first = min(t for _, t, _ in out)
    return [(rc, t - first, text) for rc, t, text in out]


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
            res = run(work, hang=hang)
            clean = res[:1] + res[2:] if hang else res
            first = min(t for _, t, _ in clean)
            check(all(rc == 0 and "left the group (initialized: False)" in text
                      for rc, _, text in clean) and max(t - first for _, t, _ in clean) < LIMIT_S,
                  "run %d: every trainer%s left its group and exited 0 (statuses %s, "
                  "the last %.1f s after the first)"
                  % (i + 1, " but the hanging one" if hang else "", [rc for rc, _, _ in clean],
                     max(t - first for _, t, _ in clean)))
            for rc, _, text in clean:
                if rc != 0:
                    print(text)
        rc, late, text = res[1]
        check(rc == 1 and "hang_at_exit" in text and "Timeout" in text
              and late < LIMIT_S + 10,
              "a trainer whose exit hangs ends %.1f s after the others, status %s, its "
              "stacks naming the wait" % (late, rc))
        if rc != 1 or "hang_at_exit" not in text:
            print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
