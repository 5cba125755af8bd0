"""Runs the minimal example of docs/python.md as written: every ```python
block whose first line is "# file: NAME" is written to NAME in a temporary
directory, then launch.py runs there (a 1-worker job: esd-ps, esdd and the
esd.torch trainer.py under torchrun). Passes when it exits 0 having trained
every iteration, printed the AUC and a valid final checkpoint.

usage: test_python_doc.py SRC_DIR BIN_DIR     exit 0 pass, 1 fail, 77 skip
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

if os.environ.get("ESD_PYTORCH_SKIP"):
    print("skip: " + os.environ["ESD_PYTORCH_SKIP"])
    sys.exit(77)
try:
    import numpy
    import torch

    del numpy, torch  # only their presence matters: the example's trainer uses them
except ImportError as e:
    print("skip: %s has no numpy/torch (%s)" % (sys.executable, e))
    sys.exit(77)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    src, bin_dir = (os.path.abspath(x) for x in sys.argv[1:])
    with open(os.path.join(src, "docs", "python.md")) as f:
        doc = f.read()
    files = {}
    for block in re.findall(r"```python\n(.*?)```", doc, re.S):
        m = re.match(r"# file: (\S+)\n", block)
        if m:
            files[m.group(1)] = block
    if set(files) != {"trainer.py", "launch.py"}:
        print("FAIL docs/python.md: expected the blocks trainer.py and launch.py, found %s"
              % sorted(files))
        return 1
    tmp = tempfile.mkdtemp(prefix="esd-pydoc.")
    for name, text in files.items():
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
    env = dict(os.environ, ESD_ROOT=src, ESD_BIN=bin_dir)
    r = subprocess.run([sys.executable, "launch.py"], cwd=tmp, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=150)
    out = r.stdout
    ok = (r.returncode == 0 and "iter 20 loss" in out and " auc " in out and
          "valid checkpoint" in out)
    print(out[-3000:])
    print(("ok   " if ok else "FAIL ") + "docs/python.md example: exit %d, 20 iterations, "
          "AUC, valid checkpoint" % r.returncode)
    if ok:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("files kept in " + tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
