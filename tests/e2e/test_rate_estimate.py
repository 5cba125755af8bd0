"""Link rates estimated by the nodes (workers.estimate_rates): the model
believes four 5 Gbit/s links, but node 3's link (its sends and the PS's
replies to it) runs at 8 Mbit/s (workers.link_rates). Node 3 measures its
pull phases, reports its rate to shard 0, every node takes it at one
iteration and re-splits the batch away from node 3; the transfers still
equal the prediction and the run still trains what one process would.
The fast links are not what limits their phases here (this host's CPU is,
the more so under a sanitizer): a fast node that reports reports what its
phases saw, far above node 3's rate, which is all the test asks of it.

usage: test_rate_estimate.py BIN_DIR
"""
import os
import subprocess
import sys
import time

from e2e_util import Env, ClusterError, ctl, poll_status

G, M = 1000000000, 1000000
SLOW = 8 * M


def main():
    env = Env(sys.argv[1], "rate-estimate")
    iters = 150
    env.gen_stream(samples=iters * 64 + 1000)
    s = env.settings(job__iterations=iters, dispatch__method="opt", workers__batch=16,
                     workers__rates="5G", workers__link_rates="5G,5G,5G,8M",
                     workers__estimate_rates="true", workers__split="link-aware",
                     workers__size_model="2,1", model__dim=64, model__optimizer="sgd")
    def during(c):
        for w in range(4):
            c.wait_socket(w)
        socks = [os.path.join(c.node_dir(w), "control.sock") for w in range(4)]
        st = ctl(socks[0], "status")
        env.check(st["batch"] == [16, 16, 16, 16] and st["rates"] == [5 * G] * 4,
                  "the model starts with four equal links: %s %s" % (st["batch"], st["rates"]))
        sts = poll_status(socks, lambda sts: len({tuple(x["rates"]) for x in sts}) == 1 and
                          sts[0]["rates"][3] < G, time.time() + 90, every=0.05)
        got = [x["rates"] for x in sts]
        env.check(len(sts) == 4 and len({tuple(r) for r in got}) == 1 and
                  abs(got[0][3] - SLOW) <= 0.25 * SLOW,
                  "node 3's measured rate is every node's, within 25 %% of %d: %s"
                  % (SLOW, got))
        if len(sts) == 4:
            est = [x.get("rate_estimate") for x in sts]
            env.check(all(e is not None for e in est) and est[3]["reports"] >= 1 and
                      all(r >= 10 * got[0][3] for r in got[0][:3]),
                      "node 3 reported; the fast nodes' model rates stay at least 10x "
                      "node 3's: %s %s" % (got[0], est))
            env.check(len({tuple(x["batch"]) for x in sts}) == 1 and
                      sts[0]["batch"][3] < 16 and sum(sts[0]["batch"]) == 64,
                      "every node re-split the batch away from node 3: %s"
                      % [x["batch"] for x in sts])

    try:
        ckpt, sums = env.run("rate-estimate", s, during=during, timeout=180)
        env.check_end("rate-estimate", sums, s, os.path.dirname(ckpt))
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
