"""The correctness bar (DESIGN §3): one PS, 4 node daemons and 4 reference
trainers, real processes and sockets, 50 iterations of a small Criteo-shaped
stream, under every dispatch method: the final tables equal a single-process
run within 1e-5 relative; two runs are bit-identical; the transfers counted
on the links equal the dispatcher's plan.

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
]


def main():
    env = Env(sys.argv[1], "bsp-exact")
    env.gen_stream()
    try:
        refs = {}
        for name, over in CASES:
            s = env.settings(**over)
            ck, sums = env.run(name, s)
            env.check_transfers(name, sums)
            key = (s["model.optimizer"], s["model.lr"])
            if key not in refs:
                refs[key] = env.reference(name, s)
            ok, out = env.compare(ck, refs[key])
            env.check(ok, "%s: final tables == single-process reference (rtol 1e-5, atol "
                      "2e-6): %s" % (name, out.splitlines()[-1] if out else ""))
            if name == "hybrid":
                ck2, _ = env.run(name + "-again", s)
                ok, out = env.compare(ck, ck2, exact=True)
                env.check(ok, "hybrid: two runs are bit-identical")
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
