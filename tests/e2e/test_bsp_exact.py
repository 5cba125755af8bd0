"""The correctness bar (docs/design.md §4): one PS shard (and 2 and 4), 4
node daemons and 4 reference trainers, real processes and sockets, 50
iterations of a small Criteo-shaped stream, under every dispatch method: the
final tables equal a single-process run within 1e-5 relative; two runs are
bit-identical; the transfers counted on the links equal the dispatcher's
plan.

usage: test_bsp_exact.py BIN_DIR
"""
import sys

from e2e_util import Env, ClusterError

CASES = [
    ("vanilla", {"dispatch__method": "vanilla", "dispatch__sync": "full-set"}),
    ("laia", {"dispatch__method": "laia"}),
    ("heu", {"dispatch__method": "heu"}),
    ("opt", {"dispatch__method": "opt"}),
    ("hybrid", {"dispatch__method": "hybrid", "dispatch__alpha": 0.25}),
    ("opt-unequal", {"dispatch__method": "opt", "workers__batch": "48,16,48,16"}),
    ("hybrid-lru-adam", {"cache__policy": "lru", "model__optimizer": "adam",
                         "model__lr": 0.01}),
    # FAE: 200 hot rows replicated and all-reduced (dense) every iteration;
    # the cache holds them beside one micro-batch's 32 x 26 keys
    ("fae", {"dispatch__method": "vanilla", "dispatch__sync": "full-set",
             "dispatch__replicate": "HOT", "cache__rows": 200 + 32 * 26}),
    # several PS shards: keys hashed over them (esd_shard_of), the dense
    # table on shard 0
    ("hybrid-2-shards", {"dispatch__method": "hybrid", "SHARDS": 2}),
    ("opt-4-shards", {"dispatch__method": "opt", "model__optimizer": "adam",
                      "model__lr": 0.01, "SHARDS": 4}),
    # several trainers per node: each a share of the micro-batch, their
    # gradients summed by the daemon in trainer order
    ("hybrid-2-trainers", {"dispatch__method": "hybrid", "workers__trainers": 2}),
    ("laia-3-trainers-2-shards", {"dispatch__method": "laia", "workers__trainers": 3,
                                  "SHARDS": 2}),
]
HOT_ROWS = 200


def main():
    env = Env(sys.argv[1], "bsp-exact")
    env.gen_stream()
    try:
        refs = {}
        hot = env.hot_rows(HOT_ROWS)
        for name, over in CASES:
            s = env.settings(**over)
            shards = s.pop("SHARDS", 1)
            if s.get("dispatch.replicate") == "HOT":
                s["dispatch.replicate"] = hot
            ck, sums = env.run(name, s, shards=shards)
            env.check_transfers(name, sums)
            if name == "fae":
                iters = int(s["job.iterations"])
                for sm in sums:
                    push = sum(ln["update_push"]["tx_rows"] for ln in sm["links"])
                    pull = sum(ln["miss_pull"]["rx_rows"] for ln in sm["links"])
                    env.check(push >= HOT_ROWS * iters and pull >= HOT_ROWS * (iters - 1),
                              "fae: worker pushes a gradient of every hot row every "
                              "iteration and pulls them all after each all-reduce "
                              "(%d pushed, %d pulled, %d hot rows x %d iterations)"
                              % (push, pull, HOT_ROWS, iters))
            key = (s["model.optimizer"], s["model.lr"])
            if key not in refs:
                refs[key] = env.reference(name, s)
            # FAE's dense all-reduce is an update of every hot row each
            # iteration (a zero gradient where no sample has it): the row
            # clocks count it, the values do not change (SGD, Adagrad)
            ok, out = env.compare(ck, refs[key], clocks=name != "fae")
            env.check(ok, "%s: final tables == single-process reference (rtol 1e-5, atol "
                      "2e-6): %s" % (name, out.splitlines()[-1] if out else ""))
            if name == "opt-4-shards":
                # ps.zero_copy: the cache's rows leave in place (tcp: one
                # writev of header and row pieces; without a job key,
                # whose tags would need the bytes in one buffer); the same
                # bytes, the same tables bit for bit
                s4 = dict(s, **{"ps.zero_copy": "on", "job.insecure": "yes"})
                ck4, sums4 = env.run(name + "-zero-copy", s4, shards=shards)
                env.check_transfers(name + "-zero-copy", sums4)
                ok, out = env.compare(ck, ck4, exact=True)
                env.check(ok, "ps.zero_copy = on: bit-identical to the copying run")
                inp = [sum(ln["in_place_bytes"] for ln in sm["links"]) for sm in sums4]
                off = [sum(ln["in_place_bytes"] for ln in sm["links"]) for sm in sums]
                env.check(all(b > 0 for b in inp) and not any(off),
                          "ps.zero_copy = on: every node sent rows in place (%s bytes), "
                          "none by default (%s)" % (inp, off))
            if name == "hybrid-2-trainers":
                ck2, _ = env.run(name + "-again", s)
                ok, out = env.compare(ck, ck2, exact=True)
                env.check(ok, "2 trainers per node: two runs are bit-identical")
            if name == "hybrid":
                ck2, _ = env.run(name + "-again", s)
                ok, out = env.compare(ck, ck2, exact=True)
                env.check(ok, "hybrid: two runs are bit-identical")
                # the exact part through the GPU solver (dispatch.gpu): a
                # device answers it, or the CPU does; the decisions (and so
                # the tables) are the same bit for bit either way
                s3 = dict(s, **{"dispatch.gpu": "true"})
                ck3, sums3 = env.run(name + "-gpu", s3)
                ok, out = env.compare(ck, ck3, exact=True)
                env.check(ok, "hybrid with dispatch.gpu: bit-identical to the CPU run")
                for sm in sums3:
                    g = sm.get("gpu") or {}
                    env.check(g.get("gpu_solved", 0) + g.get("cpu_fallbacks", 0) ==
                              sm["decision"]["steps"],
                              "dispatch.gpu worker %d: every exact part answered and "
                              "counted (%s)" % (sm["rank"], g))
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
