"""Sizes fitted online (workers.split = fit, the default of a job that
names no dispatch method): each node reports its samples, rows and
trainers' time per window, shard 0 fits the size model and every node
switches to the same unequal sizes at one iteration; the links still
carry what the dispatchers predicted and the run trains what one process
would. A method named keeps the sizes equal, as published.

usage: test_size_fit.py BIN_DIR
"""
import os
import re
import subprocess
import sys

from e2e_util import Env, ClusterError


def default_job(env, **over):
    """The env's settings without dispatch keys (the project's method)."""
    s = env.settings(**over)
    del s["dispatch.method"], s["dispatch.alpha"]
    return s


def main():
    env = Env(sys.argv[1], "size-fit")
    iters = 60
    env.gen_stream(samples=iters * 128 + 1000)
    # slow links whose time outweighs the trainers' (several times longer
    # under the sanitizers and a loaded machine): a switch pays off
    s = default_job(env, job__iterations=iters, workers__batch=32,
                    workers__rates="1G,1G,50M,50M", model__optimizer="sgd",
                    # room for unequal sizes: a cache of 32 samples' keys
                    # would pin them at 32 each
                    cache__ratio=0.5)
    try:
        from esdcluster import Cluster
        work, ck = env.run_dirs(s, "fit")
        with Cluster(env.bin, work, s) as c:
            c.start()
            c.wait(timeout=240)
            sums = c.summaries()
        with open(os.path.join(work, "ps0.log")) as f:
            pslog = f.read()
        fits = re.findall(r"fit after iteration (\d+): .* sizes (\S+) from iteration (\d+)",
                          pslog)
        env.check(fits, "shard 0 fitted the sizes and switched them: %s"
                  % (fits or "no 'fit after iteration' line in ps0.log"))
        batch = [tuple(sm["batch"]) for sm in sums]
        env.check(len(set(batch)) == 1, "every node ends with the same sizes: %s" % batch)
        b = batch[0]
        env.check(sum(b) == 128 and min(b[0], b[1]) > max(b[2], b[3]),
                  "the fast links' workers train more samples: %s" % (b,))
        if fits:
            env.check(",".join(str(x) for x in b) == fits[-1][1],
                      "the sizes are shard 0's last fit: %s" % fits[-1][1])
            # a window of 4 ends at 6, 10, 14, ...; its switch is in effect
            # 4 iterations later (how soon one pays depends on the measured
            # compute time: the sanitizer build's is several times longer)
            bad = [f for f in fits if (int(f[0]) - 2) % 4 or int(f[2]) != int(f[0]) + 4]
            env.check(not bad, "every switch follows a window's end by 4 iterations: %s"
                      % fits)
        mdl = [sm.get("size_model") or {} for sm in sums]
        env.check(all(m.get("split") == "fit" and m.get("reports", 0) >= 5 for m in mdl),
                  "every node reported its windows: %s" % [m.get("reports") for m in mdl])
        obs = [m.get("observed") or {} for m in mdl]
        env.check(all(o.get("iterations") == iters and o.get("rows", 0) > 0
                      and o.get("rows") == o.get("rows_any_dim") for o in obs),
                  "without model.dims the fitter counts the predicted rows: %s" % obs)
        env.check(all(m.get("measured_compute_ns_per_sample", 0) > 0 for m in mdl),
                  "every node measured its trainer's time per sample: %s"
                  % [m.get("measured_compute_ns_per_sample") for m in mdl])
        env.check(len({(m.get("fixed_rows"), m.get("rows_per_sample"),
                        m.get("compute_ns_per_sample")) for m in mdl}) == 1,
                  "every node has the same model: %s" % mdl)
        env.check_end("fit", sums, s, ck)
        # a method named: as published, equal sizes and no fit
        s2 = dict(s, **{"dispatch.method": "laia"})
        work, ck = env.run_dirs(s2, "laia")
        with Cluster(env.bin, work, s2) as c:
            c.start()
            c.wait(timeout=240)
            sums = c.summaries()
        env.check(all(sm["batch"] == [32] * 4 for sm in sums),
                  "laia named: equal sizes: %s" % [sm["batch"] for sm in sums])
        env.check(all(sm.get("size_model") is None for sm in sums),
                  "laia named: no fitted split: %s" % [sm.get("size_model") for sm in sums])
    except (ClusterError, subprocess.TimeoutExpired) as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
