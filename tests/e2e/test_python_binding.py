"""The Python binding: importable from the build tree with /usr/bin/python3,
numpy views of the shared rows without copies; a job whose trainers are all
Python processes runs to the end.

usage: test_python_binding.py BIN_DIR PYTHON_DIR
"""
import os
import subprocess
import sys

from e2e_util import Env, ClusterError

PY = "/usr/bin/python3"


def main():
    bin_dir, py_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    if os.environ.get("ESD_PYTORCH_SKIP"):  # (a sanitizer build without libasan.so)
        print("SKIP: " + os.environ["ESD_PYTORCH_SKIP"])
        return 77
    if subprocess.run([PY, "-c", "import numpy"], capture_output=True).returncode:
        print("SKIP: /usr/bin/python3 has no numpy")
        return 77
    env = Env(bin_dir, "pybind")
    env.gen_stream()
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = py_dir
    r = subprocess.run([PY, "-c", "import esd; print(esd.__file__)"], capture_output=True,
                       text=True)
    env.check(r.returncode == 0 and r.stdout.startswith(py_dir),
              "import esd from the build tree: %s" % (r.stdout.strip() or r.stderr.strip()))
    try:
        from esdcluster import Cluster
        s = env.settings(workers__n=2, job__iterations=20, ps__checkpoint_every=5)
        work, _ = env.run_dirs(s, "job")
        with Cluster(bin_dir, work, s, trainer_cmd=lambda w, d: [
                PY, os.path.join(here, "py_trainer.py"), d, "5"]) as c:
            c.start()
            c.wait(timeout=120)
            sums = c.summaries()
            codes = [c.procs["trainer%d" % w].wait(timeout=30) for w in range(2)]
        env.check(codes == [0, 0], "both Python trainers checked their views, bag offsets "
                  "and checkpoint flags and ended cleanly (exit codes %s)" % codes)
        env.check(all(sm["iterations"] == 20 for sm in sums), "the job ran to the end")
    except ClusterError as e:
        env.check(False, "cluster: %s" % e)
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
