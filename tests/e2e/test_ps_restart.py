"""kill -9 of the PS mid-run, restart from its checkpoint: the node daemons
notice, reconnect, roll their caches and dispatchers back to the
checkpoint boundary, and training ends bit-identical to an uninterrupted
run.

usage: test_ps_restart.py BIN_DIR
"""
import os
import signal
import sys
import time

from e2e_util import Env, ClusterError
from test_failures import ctl


def main():
    env = Env(sys.argv[1], "ps-restart")
    env.gen_stream(samples=20000)
    s = env.settings(job__iterations=300, ps__checkpoint_every=20)
    try:
        base_ck, _ = env.run("uninterrupted", s)
        from esdcluster import Cluster
        work = os.path.join(env.root, "restarted")
        ck = os.path.join(work, "ckpt")
        os.makedirs(ck, exist_ok=True)
        s2 = dict(s)
        s2["ps.checkpoint_dir"] = ck
        with Cluster(env.bin, work, s2) as c:
            c.start()
            sock = os.path.join(work, "ps0.sock")
            it = 0
            t0 = time.time()
            while it < 50 and time.time() - t0 < 60:
                try:
                    it = ctl(sock, "status")["iteration"]
                except OSError:
                    pass
                time.sleep(0.005)
            env.check(50 <= it < 300, "the PS is killed mid-run (at iteration %d)" % it)
            c.kill("ps0", signal.SIGKILL)
            time.sleep(0.3)
            c.start_ps(0, restore=True)
            c.wait(timeout=120)
            sums = c.summaries()
        env.check(all(sm["iterations"] == 300 for sm in sums),
                  "every daemon finished all 300 iterations")
        with open(os.path.join(work, "esdd0.log")) as f:
            log = f.read()
        env.check("resumed at iteration" in log, "daemon 0 resumed from the checkpoint")
        ok, out = env.compare(os.path.join(ck, "ps-shard0.ckpt"), base_ck, exact=True)
        env.check(ok, "final tables bit-identical to the uninterrupted run: %s" % out)
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
