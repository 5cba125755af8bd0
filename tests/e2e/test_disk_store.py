"""Rows on local disk (ps.store_dir): a shard whose hot-row cache holds a
small part of its table trains exactly as with the rows in RAM.

One shard, ps.store_ram 1 MiB (about 1,500 hot rows of dim 64, Adagrad)
against a table of tens of thousands of rows, so most pulls and pushes go
through the mapped row file and evictions write rows back. Checks: the
job ends, and its final tables are bit for bit those of the same job with
the rows in RAM (which test_bsp_exact holds to esd-ref). The bounded
memory of a shard whose table is four times its limit is
tests/e2e/test_bigtable.py's.

usage: test_disk_store.py BIN_DIR
"""
import os
import re
import subprocess
import sys

from e2e_util import Env, ClusterError


def rows_at_end(log):
    """The rows the shard's last full checkpoint wrote (its log line)."""
    rows = None
    with open(log) as f:
        for line in f:
            m = re.search(r"checkpoint of iteration \d+: full of (\d+) rows", line)
            if m:
                rows = int(m.group(1))
    return rows


def main():
    env = Env(sys.argv[1], "diskstore")
    # wide, flat tables: tens of thousands of distinct rows in 60 iterations
    subprocess.run([os.path.join(env.bin, "esd-data"), "gen", "-o", env.stream,
                    "--shape", "criteo-kaggle", "-n", "8000", "--scale", "1",
                    "--max-rows", "20000", "--zipf", "0.5", "--seed", "7"],
                   check=True, stdout=subprocess.DEVNULL)
    s = env.settings(**{"model.dim": 64, "job.iterations": 60})
    try:
        ck_ram, _ = env.run("ram", s)
        store = os.path.join(env.root, "rows")
        os.makedirs(store)
        sd = dict(s, **{"ps.store_dir": store, "ps.store_ram": 1})
        ck_disk, _ = env.run("disk", sd)
        rows = rows_at_end(os.path.join(env.root, "disk", "ps0.log"))
        hot = (1 << 20) * 3 // 4 // (16 + 64 * 2 * 4)
        env.check(rows is not None and rows > 10 * hot,
                  "the table (%s rows) is over ten times the hot-row cache (%d rows)"
                  % (rows, hot))
        ok, out = env.compare(ck_ram, ck_disk, exact=True)
        env.check(ok, "rows on disk: final tables bit-identical to the rows in RAM: %s"
                  % (out.splitlines()[-1] if out else ""))
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
