"""A job trains on weighted bags (docs/multihot.md, "Weighted bags"): a
stream written by esd.esdio with a weight per ID (4000 samples of 4
tables; tables 1 and 3 bags of 0..5 IDs, repeats and empty bags
included; weights in [-1, 2], a few 0), real esd-ps, esdd and esd-trainer
processes. With 4 node daemons the final tables equal esd-ref's
single-process training on the same file within test_multihot's
tolerance, every link's rows equal the prediction, and the weights
matter (the same IDs unweighted train other tables); so with 2 trainers
a node (each trainer its share's weights); with 1 node the tables equal
esd-ref's bit for bit. esd-data dump shows the weights esdio wrote.

usage: test_weighted_bags.py BIN_DIR      exit 0 pass, 1 fail, 77 skip
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

ATOL = "4e-6"  # bags sum several rows: test_multihot's tolerance
ROWS = [1500, 600, 50, 3000]
BAGS = [1, 5, 1, 5]


def batches(seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        m = 500
        ids, wts = [], []
        for t, r in enumerate(ROWS):
            n = m if BAGS[t] == 1 else None
            if n:
                ids.append(rng.zipf(1.2, m) % r)
                wts.append(rng.integers(-4, 9, m) / 4.0)
            else:
                ln = rng.integers(0, BAGS[t] + 1, m)
                k = int(ln.sum())
                ids.append((rng.zipf(1.2, k) * 2654435761 % r, ln))
                wts.append(rng.integers(-4, 9, k) / 4.0)  # multiples of 1/4 in [-1, 2]
        dense = np.log1p(rng.exponential(3.0, (m, 2)))
        labels = rng.random(m) < 0.15 + 0.5 * (ids[0] < 30)
        yield labels, dense, ids, wts


def write_stream(path, weighted):
    with esdio.Writer(path, ROWS, ndense=2, max_bag=BAGS, block_samples=1000,
                      weighted=weighted) as w:
        for labels, dense, ids, wts in batches(5):
            w.write(labels, dense, ids, weights=wts if weighted else None)
    return w.count


def dump_weights(env, path):
    """The first sample's bag of table 1 as esd-data dump prints it."""
    out = subprocess.run([os.path.join(env.bin, "esd-data"), "dump", path, "-n", "1"],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return out.split("|")[1].split()


def main():
    env = Env(sys.argv[1], "weighted")
    try:
        n = write_stream(env.stream, True)
        env.check(n == 4000, "esdio wrote %d weighted samples" % n)
        first = next(batches(5))
        fields = dump_weights(env, env.stream)
        w0 = float(fields[0].split(":")[2])
        env.check(w0 == float(first[3][0][0]),
                  "esd-data dump shows the weight esdio wrote (%s)" % fields[0])
        s = env.settings(job__iterations=40)
        ck, sums = env.run("weighted", s)
        env.check(all(sm["status"] == 0 and sm["iterations"] == 40 for sm in sums),
                  "4 nodes ran the 40 iterations (the decision digests agreed)")
        env.check_transfers("weighted", sums)
        ref = env.reference("weighted", s)
        ok, out = env.compare(ck, ref, atol=ATOL)
        env.check(ok, "4 nodes: final tables == esd-ref on the weighted stream (rtol 1e-5, "
                  "atol %s): %s" % (ATOL, out.splitlines()[-1] if out else ""))
        plain = os.path.join(env.root, "plain.esd")
        write_stream(plain, False)
        s_plain = dict(s, **{"data.stream": plain})
        ok, out = env.compare(ck, env.reference("plain", s_plain), atol=ATOL)
        env.check(not ok, "the weights matter: the same IDs unweighted give other tables")
        s2 = env.settings(job__iterations=40, workers__trainers=2, dispatch__method="laia")
        ck2, sums2 = env.run("weighted-2-trainers", s2)
        env.check(all(sm["status"] == 0 for sm in sums2), "4 nodes of 2 trainers ran the job")
        ok, out = env.compare(ck2, env.reference("weighted-2-trainers", s2), atol=ATOL)
        env.check(ok, "2 trainers per node (each its share's weights): final tables == "
                  "esd-ref: %s" % (out.splitlines()[-1] if out else ""))
        s1 = env.settings(job__iterations=40, workers__n=1, workers__batch=128)
        ck1, sums1 = env.run("weighted-1", s1)
        env.check(all(sm["status"] == 0 for sm in sums1), "1 node ran the job")
        ok, out = env.compare(ck1, env.reference("weighted-1", s1), exact=True)
        env.check(ok, "1 node: final tables == esd-ref bit for bit: %s"
                  % (out.splitlines()[-1] if out else ""))
    except (ClusterError, subprocess.CalledProcessError, OSError, esdio.StreamError) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
