"""A job whose links cannot open on this host stops at once, naming why
(esdd used to retry for 60 s without a device while esd-ps failed):
- ps.backend = rdma with no RDMA device here: esd-ps and esdd each exit
  non-zero within 1 s, naming the device (ps.rdma_device = mlx5_0, or "no
  RDMA device" when the key is unset) and the key; in a build without
  libibverbs the same, naming ps.backend and "not built";
- ps.backend = dpdk with EAL arguments the EAL refuses: esdd does not
  retry its connect (it used to for 60 s), it exits within a few seconds
  of start (it loads the stream first) naming ps.dpdk_eal.
Each time measured and printed. Skips (77) on a host with /dev/infiniband,
where the no-device path cannot be shown.

usage: test_rdma_nodev.py BIN_DIR
"""
import os
import subprocess
import sys
import time

from e2e_util import Env
from esdcluster import Cluster, write_ini


def timed_exit(c, name, argv, limit):
    """Start argv as process name of cluster c; (exit code or None, seconds,
    its output). None: still running after limit (then it is stopped)."""
    t0 = time.monotonic()
    p = c._spawn(name, argv)
    try:
        rc = p.wait(timeout=limit + 5)
    except subprocess.TimeoutExpired:
        rc = None
    took = time.monotonic() - t0
    with open(os.path.join(c.work, name + ".log")) as f:
        return rc, took, f.read()


def start_both(env, c, settings, limit, what, wants):
    """esd-ps and esdd of a job that cannot open links: both exit non-zero
    within limit seconds, their output holding every string of wants."""
    os.makedirs(c.node_dir(0), mode=0o700, exist_ok=True)
    write_ini(c.job, settings)
    runs = {
        "esd-ps": timed_exit(c, "ps0", [os.path.join(env.bin, "esd-ps"), "--config", c.job,
                                        "--listen", "127.0.0.1:0"], limit),
        "esdd": timed_exit(c, "esdd0", [os.path.join(env.bin, "esdd"), "--config", c.job,
                                        "--rank", "0", "--dir", c.node_dir(0), "--set",
                                        "ps.addrs=127.0.0.1:1"], limit),
    }
    for prog, (rc, took, out) in runs.items():
        lines = [ln for ln in out.splitlines() if "ERROR" in ln]
        print("# %s, %s: exit %s after %.3f s: %s" % (what, prog, rc, took, lines[-1:]))
        env.check(rc not in (None, 0) and took < limit,
                  "%s: %s exits non-zero within %g s (%.3f s, exit %s)"
                  % (what, prog, limit, took, rc))
        missing = [w for w in wants if w not in out]
        env.check(not missing, "%s: %s names %s (missing: %s)" % (what, prog, wants, missing))
    return runs


def rdma_built(env):
    """Whether this build has the rdma backend (esd-ps says "not built")."""
    work = os.path.join(env.root, "probe")
    os.makedirs(work, exist_ok=True)
    ini = os.path.join(work, "job.ini")
    write_ini(ini, {"ps.backend": "rdma"})
    r = subprocess.run([os.path.join(env.bin, "esd-ps"), "--config", ini, "--listen",
                        "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    return "not built" not in r.stdout


def test_rdma(env):
    built = rdma_built(env)
    print("# the rdma backend is %s in this build" % ("built" if built else "not built"))
    cases = [("rdma, ps.rdma_device = mlx5_0", {"ps.rdma_device": "mlx5_0"},
              ["mlx5_0", "ps.rdma_device"] if built else ["ps.backend", "not built"]),
             ("rdma, ps.rdma_device unset", {},
              ["no RDMA device", "ps.rdma_device"] if built else ["ps.backend", "not built"])]
    for i, (what, over, wants) in enumerate(cases):
        s = env.settings(workers__n=1)
        s.update({"ps.backend": "rdma", "job.insecure": "yes"})
        s.update(over)
        with Cluster(env.bin, os.path.join(env.root, "rdma%d" % i), s) as c:
            start_both(env, c, s, 1.0, what, wants)


def test_dpdk_bad_eal(env):
    """The EAL refuses an unknown option: esdd's connect fails with -ENODEV,
    for good, so it exits instead of retrying for a minute."""
    s = env.settings(workers__n=1)
    s.update({"ps.backend": "dpdk", "ps.dpdk_eal": "--no-such-eal-option", "job.insecure": "yes"})
    with Cluster(env.bin, os.path.join(env.root, "dpdk"), s) as c:
        os.makedirs(c.node_dir(0), mode=0o700, exist_ok=True)
        write_ini(c.job, s)
        rc, took, out = timed_exit(c, "esdd0", [
            os.path.join(env.bin, "esdd"), "--config", c.job, "--rank", "0", "--dir",
            c.node_dir(0), "--set", "ps.addrs=" + os.path.join(c.work, "ps0.sock")], 10)
    lines = [ln for ln in out.splitlines() if "ERROR" in ln]
    print("# dpdk with a bad EAL option, esdd: exit %s after %.3f s: %s" % (rc, took, lines[-1:]))
    want = "ps.dpdk_eal" if "not built" not in out else "not built"
    env.check(rc not in (None, 0) and took < 10 and want in out,
              "dpdk, an EAL that does not start: esdd exits non-zero at once without "
              "retrying (%.3f s), naming %s" % (took, want))


def main():
    if os.path.exists("/dev/infiniband"):
        print("SKIP: this host has /dev/infiniband: the no-device path cannot be shown")
        return 77
    env = Env(sys.argv[1], "nodev")
    env.gen_stream(samples=2000)
    test_rdma(env)
    test_dpdk_bad_eal(env)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
