"""The Debian package: builds it from this build tree (cpack -G DEB),
checks its control fields and file list, verifies its systemd units
(systemd-analyze verify), unpacks it into a scratch root (dpkg -x: the
real / is not touched) and runs a small job from the unpacked files
only: esd-data writes a stream, one esd-ps shard, 2 esdd and 2
esd-trainer run it to its end, and esd-ref (the unpacked one) finds the
final tables equal to the single-process reference. The Python binding
is imported from the unpacked tree and finds the unpacked libesd.

usage: test_deb.py BUILD_DIR
Exits 77 when a tool it needs (cpack, dpkg-deb, dpkg-shlibdeps) is missing.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from e2e_util import Env, ClusterError  # noqa: E402
from esdcluster import Cluster  # noqa: E402

PROGRAMS = ("esd-ps", "esdd", "esdctl", "esd-trainer", "esd-data", "esd-ref", "esd-replay",
            "esd-info", "esd-launch", "esd-export", "esd-k8s")
UNITS = ("esd-ps@.service", "esdd@.service")


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=kw.pop("timeout", 600), **kw)


def build_deb(build, out):
    r = run(["cpack", "-G", "DEB", "-B", out], cwd=build)
    debs = glob.glob(os.path.join(out, "esd_*.deb"))
    if r.returncode or len(debs) != 1:
        print(r.stdout)
        raise SystemExit("FAIL cpack -G DEB (exit %d) made %s" % (r.returncode, debs))
    return debs[0]


def check_control(env, deb):
    fields = run(["dpkg-deb", "-f", deb]).stdout
    print(fields, end="")
    f = dict(ln.split(": ", 1) for ln in fields.splitlines() if ": " in ln)
    env.check(os.path.basename(deb) == "esd_%s_%s.deb" % (f.get("Version"),
                                                           f.get("Architecture")),
              "named esd_<version>_<arch>.deb: %s" % os.path.basename(deb))
    dep = f.get("Depends", "")
    env.check("libc6" in dep and "python3" in dep,
              "Depends: from what the binaries link (libc6 ...) and python3: %s" % dep)
    ctl = run(["dpkg-deb", "--ctrl-tarfile", deb]).returncode == 0 and \
        run(["sh", "-c", "dpkg-deb --ctrl-tarfile '%s' | tar -t" % deb]).stdout
    env.check("./postinst" in ctl and "./triggers" in ctl,
              "control: postinst (the esd user) and the ldconfig trigger: %s"
              % ctl.split())


def check_files(env, root):
    arch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"]).stdout.strip()
    want = ["usr/bin/" + p for p in PROGRAMS] + ["lib/systemd/system/" + u for u in UNITS]
    want += ["usr/lib/%s/libesd.so" % arch, "usr/include/esd/libesd.h",
             "usr/lib/python3/dist-packages/esd/__init__.py", "usr/lib/sysusers.d/esd.conf",
             "etc/esd", "usr/share/esd/slurm/esd.sbatch"]
    missing = [w for w in want if not os.path.exists(os.path.join(root, w))]
    env.check(not missing, "the package holds the programs, libesd, its headers, the "
              "binding and the units (missing: %s)" % missing)
    return os.path.join(root, "usr/lib", arch)


def verify_units(env, root):
    """systemd-analyze verify, each unit with its ExecStart's program
    from the unpacked tree (verify checks that it exists and is
    executable)."""
    if not shutil.which("systemd-analyze"):
        print("note: no systemd-analyze; units not verified")
        return
    d = tempfile.mkdtemp(prefix="esd-units.")
    for u in UNITS:
        text = open(os.path.join(root, "lib/systemd/system", u)).read()
        open(os.path.join(d, u), "w").write(text.replace("/usr/bin/", root + "/usr/bin/"))
        r = run(["systemd-analyze", "verify", os.path.join(d, u.replace("@", "@0"))],
                cwd=d, env=dict(os.environ, SYSTEMD_UNIT_PATH=d + ":"))
        # on a machine without systemd as init, verify prints notes about
        # the manager; what counts is what it says about our unit
        ours = [ln for ln in r.stdout.splitlines() if u.split("@")[0] in ln]
        env.check(r.returncode == 0 and not ours,
                  "systemd-analyze verify %s: exit %d, %s" % (u, r.returncode,
                                                               ours or "no complaint"))
    shutil.rmtree(d, ignore_errors=True)


def run_job(env, root, libdir):
    """A job from the unpacked files only: programs, libesd (through
    LD_LIBRARY_PATH: the .deb puts it on the loader's path), nothing of
    the build tree on PATH."""
    bin_dir = os.path.join(root, "usr/bin")
    os.environ["PATH"] = bin_dir + ":/usr/bin:/bin"
    os.environ["LD_LIBRARY_PATH"] = libdir
    env.bin = bin_dir
    r = run(["esd-info"])
    env.check(r.returncode == 0, "esd-info (unpacked) runs: exit %d" % r.returncode)
    # esd-launch finds its module under share/esd/launch and reads a job
    # with the programs beside it (a missing hosts file: its own error)
    r = run([sys.executable, os.path.join(bin_dir, "esd-launch"), "--job", "/nonexistent.ini",
             "--hosts", "/nonexistent-hosts.ini"])
    env.check(r.returncode != 0 and "Traceback" not in r.stdout and "nonexistent" in r.stdout,
              "esd-launch (unpacked) runs and names the missing file: %r" % r.stdout[-300:])
    env.gen_stream(samples=4000)
    s = env.settings(**{"workers.n": 2, "job.iterations": 30})
    work, ck = env.run_dirs(s, "deb-job")
    with Cluster(bin_dir, work, s, shards=1) as c:
        c.start()
        for name, p in c.procs.items():
            exe = os.path.realpath("/proc/%d/exe" % p.pid)
            env.check(exe.startswith(root), "%s runs %s" % (name, exe))
        c.wait(timeout=180)
        sums = c.summaries()
    env.check_end("deb-job", sums, s, ck)


def sanitizer_preload(lib):
    """A sanitizer build's libesd needs libasan loaded first in an
    uninstrumented python (as the build's own binding tests do): the
    environment for that, or {} for a normal build."""
    needed = run(["objdump", "-p", lib]).stdout
    if "libasan" not in needed:
        return {}
    libs = [run(["cc", "-print-file-name=" + n]).stdout.strip()
            for n in ("libasan.so", "libstdc++.so.6")]
    return {"LD_PRELOAD": ":".join(x for x in libs if os.path.isabs(x)),
            "ASAN_OPTIONS": "detect_leaks=0"}


def check_binding(env, root, libdir):
    """import esd from the unpacked tree: it finds the unpacked libesd
    beside it (no ESD_LIB, no LD_LIBRARY_PATH)."""
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    e = {k: v for k, v in os.environ.items() if k not in ("ESD_LIB", "LD_LIBRARY_PATH")}
    e["PYTHONPATH"] = os.path.join(root, "usr/lib/python3/dist-packages")
    e.update(sanitizer_preload(os.path.join(libdir, "libesd.so")))
    r = run([py, "-c", "import esd, ctypes; l = esd._load(); "
             "import os; print(esd.__file__); "
             "print([x for x in open('/proc/self/maps').read().split() "
             "if x.endswith('libesd.so')][0])"], env=e)
    out = r.stdout.split()
    if r.returncode and "numpy" in r.stdout:
        print("note: %s has no numpy: the binding not imported" % py)
        return
    env.check(r.returncode == 0 and len(out) >= 2 and out[0].startswith(root) and
              out[-1].startswith(libdir),
              "import esd from the package finds its libesd: %s" % r.stdout.strip())


def main():
    build = os.path.abspath(sys.argv[1])
    for tool in ("cpack", "dpkg-deb", "dpkg-shlibdeps"):
        if not shutil.which(tool):
            print("SKIP: %s not found (apt-get install dpkg-dev cmake)" % tool)
            return 77
    env = Env(os.path.join(build, "bin"), "deb")
    deb = build_deb(build, os.path.join(env.root, "pkg"))
    print("built %s" % deb)
    check_control(env, deb)
    root = os.path.join(env.root, "root")
    r = run(["dpkg", "-x", deb, root])
    env.check(r.returncode == 0, "dpkg -x: %s" % r.stdout.strip())
    libdir = check_files(env, root)
    verify_units(env, root)
    check_binding(env, root, libdir)
    try:
        run_job(env, root, libdir)
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
