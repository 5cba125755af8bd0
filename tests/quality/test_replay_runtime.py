"""esd-replay agrees exactly with the runtime: for the same stream and job
INI, the transfers replay counts per kind (its "job" mechanism) equal the
plan every node daemon computed (summary plan_all_workers, hits) and the
rows counted on the links, for several methods, matrices, sizes and
policies. Real esd-ps, esdd and trainer processes on this host.

usage: test_replay_runtime.py BIN_DIR
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from e2e_util import Env, ClusterError, link_rows  # noqa: E402

CASES = [
    ("hybrid", {}),
    ("vanilla-full-set", {"dispatch__method": "vanilla", "dispatch__sync": "full-set"}),
    ("laia-unequal", {"dispatch__method": "laia", "workers__batch": "48,16,40,24",
                      "workers__rates": "5G,0.5G,5G,0.5G"}),
    ("opt-shared-lru", {"dispatch__method": "opt", "dispatch__matrix": "shared",
                        "workers__batch": "56,8,56,8", "cache__policy": "lru",
                        "dispatch__local_search": 2000}),
    ("opt-link-aware", {"dispatch__method": "opt", "workers__rates": "5G,5G,0.5G,0.5G",
                        "workers__compute_ns_per_sample": 3000, "workers__split": "link-aware",
                        "workers__size_model": "128.5,6.02"}),
    ("heu-lfu", {"dispatch__method": "heu", "cache__policy": "lfu"}),
    # FAE: 150 hot rows replicated on every worker (esd-data hot)
    ("fae", {"dispatch__method": "vanilla", "dispatch__sync": "full-set",
             "dispatch__replicate": "HOT", "cache__rows": 150 + 32 * 26}),
]


def replay(env, ini):
    r = subprocess.run([os.path.join(env.bin, "esd-replay"), "--config", ini, "--mechanisms",
                        "job", "--format", "json"], stdout=subprocess.PIPE, text=True,
                       check=True)
    return json.loads(r.stdout)["mechanisms"][0]


def main():
    env = Env(sys.argv[1], "replay-runtime")
    env.gen_stream()
    try:
        hot = env.hot_rows(150)
        for name, over in CASES:
            s = env.settings(**over)
            if s.get("dispatch.replicate") == "HOT":
                s["dispatch.replicate"] = hot
            _, sums = env.run(name, s)
            env.check(all(sm["status"] == 0 for sm in sums), "%s: run ok" % name)
            env.check_transfers(name, sums)
            rp = replay(env, os.path.join(env.root, name, "job.ini"))
            plan = sums[0]["plan_all_workers"]
            got = rp["transfers"]
            env.check(got == plan, "%s: replay transfers %s == runtime plan %s"
                      % (name, got, plan))
            env.check(rp["hits"] == sums[0]["plan_hits_all_workers"],
                      "%s: replay hits %d == runtime %d"
                      % (name, rp["hits"], sums[0]["plan_hits_all_workers"]))
            link = link_rows(sums)
            want = {"miss_pull": got["miss_pull"],
                    "update_push": got["update_value"] + got["update_grad"],
                    "evict_push": got["evict_push"]}
            env.check(link == want, "%s: rows on the links %s == replay %s"
                      % (name, link, want))
            env.check(rp["true_cost_ns"] == sums[0]["decision"]["true_cost_sum"],
                      "%s: replay true cost %d == runtime %d"
                      % (name, rp["true_cost_ns"], sums[0]["decision"]["true_cost_sum"]))
    except (ClusterError, subprocess.CalledProcessError) as e:
        env.check(False, "run: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
