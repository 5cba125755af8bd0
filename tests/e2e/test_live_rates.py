"""Live link rates (esdctl set workers.rates on PS shard 0, or worker.rate
on one node, which reports it to shard 0): every node switches its row
costs and, with a link-aware split, its batch sizes at the same iteration,
the links shape at the new rates, the transfers still equal the prediction
and the run still trains what one process would.

usage: test_live_rates.py BIN_DIR
"""
import os
import subprocess
import sys
import time

from e2e_util import Env, ClusterError, ctl, poll_status
from test_live_set import esdctl, wait_iter

G, M = 1000000000, 1000000


def main():
    env = Env(sys.argv[1], "live-rates")
    iters = 1500
    env.gen_stream(samples=iters * 64 + 1000)
    s = env.settings(job__iterations=iters, dispatch__method="opt", workers__batch=16,
                     workers__rates="5G,5G,0.5G,0.5G", workers__split="link-aware",
                     workers__size_model="2,1",
                     # SGD: 1500 iterations without Adagrad's amplified float
                     # drift (docs/runtime.md, "Exactness"), so the default
                     # tolerance holds
                     model__optimizer="sgd")
    try:
        from esdcluster import Cluster
        work, ck = env.run_dirs(s)
        with Cluster(env.bin, work, s) as c:
            c.start()
            ps = os.path.join(work, "ps0.sock")
            for w in range(4):
                c.wait_socket(w)
            node0 = os.path.join(c.node_dir(0), "control.sock")
            st = ctl(node0, "status")
            env.check(st["batch"][0] > st["batch"][2] and sum(st["batch"]) == 64,
                      "link-aware sizes favour the fast links: %s" % st["batch"])
            before = st["batch"]
            rc, out, err = esdctl(env, "--socket", ps, "set", "workers.rates", "1G,2G")
            env.check(rc != 0 and "expected 4 bit rates" in err,
                      "a wrong number of rates is refused: %s" % err.strip())
            rc, out, err = esdctl(env, "--node", c.node_dir(0), "set", "workers.rates", "5G")
            env.check(rc != 0 and "PS shard 0" in err,
                      "a node refuses workers.rates with where to send it: %s" % err.strip())
            deadline = time.time() + 60
            at = None
            while time.time() < deadline:
                rc, out, err = esdctl(env, "--socket", ps, "set", "workers.rates",
                                      "0.5G,0.5G,5G,5G")
                if rc == 0:
                    at = int(out.split("from iteration")[1].split()[0])
                    break
                if "pending" not in err:
                    break
                time.sleep(0.02)
            env.check(at is not None and at < iters, "workers.rates scheduled at iteration "
                      "%s: %s" % (at, (out or err).strip()))
            if at:
                wait_iter(ps, at + 1, deadline)
                sts = [ctl(os.path.join(c.node_dir(w), "control.sock"), "status")
                       for w in range(4)]
                env.check(all(x["rates"] == [M * 500, M * 500, 5 * G, 5 * G] for x in sts),
                          "every node has the new rates: %s" % [x["rates"] for x in sts])
                env.check(all(x["batch"] == list(reversed(before)) for x in sts),
                          "every node re-split the batch the other way: %s -> %s"
                          % (before, [x["batch"] for x in sts]))
                ln = ctl(node0, "links")
                env.check(all(x["rate_bps"] == 500 * M for x in ln["links"]),
                          "node 0's links shape at 0.5G now: %s"
                          % [x["rate_bps"] for x in ln["links"]])
            # a node's own rate: worker.rate on node 0 reaches every node
            rc, out, err = esdctl(env, "--node", c.node_dir(0), "set", "worker.rate", "5G")
            env.check(rc == 0, "worker.rate on node 0: %s" % (err or out).strip())
            want = [5 * G, M * 500, 5 * G, 5 * G]
            socks = [os.path.join(c.node_dir(w), "control.sock") for w in range(4)]
            sts = poll_status(socks, lambda sts: all(x["rates"] == want for x in sts), deadline)
            got = [x["rates"] for x in sts]
            env.check(len(sts) == 4 and all(r == want for r in got),
                      "node 0's reported rate is every node's: %s" % got)
            env.check(len(sts) == 4 and len({tuple(x["batch"]) for x in sts}) == 1 and
                      sts[0]["batch"][0] > sts[0]["batch"][1],
                      "every node re-split for it: %s" % [x["batch"] for x in sts])
            c.wait(timeout=120)
            sums = c.summaries()
        env.check_end("live-rates", sums, s, ck)
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
