"""A job trains on a stream written by esd.esdio (docs/python.md, "Your own
data"): 6000 samples of 5 tables written from numpy batches (Zipf IDs;
table 1 with bags of 0..6 IDs, repeats and empty bags included), 4 node
daemons with C trainers, real esd-ps, esdd and esd-trainer processes. Every node runs every iteration, the rows
on every link equal the prediction, and the final tables equal esd-ref's
single-process training on the same file.

usage: test_esdio_train.py BIN_DIR      exit 0 pass, 1 fail, 77 skip
"""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError as e:
    print("skip: %s has no numpy (%s)" % (sys.executable, e))
    sys.exit(77)

from e2e_util import Env, ClusterError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "runtime", "python"))
from esd import esdio  # noqa: E402

# bags sum several rows: the tolerance of test_multihot
ATOL = "4e-6"


def write_stream(path):
    rng = np.random.default_rng(3)
    rows = [2000, 800, 40, 5000, 300]
    with esdio.Writer(path, rows, ndense=3, max_bag=[1, 6, 1, 1, 1], block_samples=1000) as w:
        for _ in range(12):
            m = 500
            ids = [rng.zipf(1.2, m) % r for r in rows]
            ids[3] = (rng.zipf(1.2, m) * 2654435761) % rows[3]  # hot IDs scattered
            lengths = rng.integers(0, 7, m)
            ids[1] = (rng.zipf(1.2, int(lengths.sum())) % rows[1], lengths)
            dense = np.log1p(rng.exponential(3.0, (m, 3)))
            labels = rng.random(m) < 0.15 + 0.5 * (ids[0] < 30)
            w.write(labels, dense, ids)
    return w.count


def main():
    env = Env(sys.argv[1], "esdio")
    try:
        n = write_stream(env.stream)
        env.check(n == 6000, "esdio wrote %d samples" % n)
        s = env.settings(job__iterations=40)
        ck, sums = env.run("esdio", s)
        env.check(all(sm["status"] == 0 and sm["iterations"] == 40 for sm in sums),
                  "every node ran the 40 iterations (the decision digests agreed)")
        env.check_transfers("esdio", sums)
        ok, out = env.compare(ck, env.reference("esdio", s), atol=ATOL)
        env.check(ok, "final tables == single-process reference (rtol 1e-5, atol %s): %s"
                  % (ATOL, out.splitlines()[-1] if out else ""))
    except (ClusterError, subprocess.CalledProcessError, OSError, esdio.StreamError) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
