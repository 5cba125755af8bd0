"""Imported first by the PyTorch tests: exits 77 (skip) with the reason
where they cannot run: a sanitizer build without libasan to preload
(ESD_PYTORCH_SKIP, set by CMake), or an interpreter without torch/numpy."""
import os
import sys

if os.environ.get("ESD_PYTORCH_SKIP"):
    print("skip: " + os.environ["ESD_PYTORCH_SKIP"])
    sys.exit(77)
try:
    import numpy  # noqa: F401
    import torch  # noqa: F401
except ImportError as e:
    print("skip: %s has no torch/numpy (%s)" % (sys.executable, e))
    sys.exit(77)
