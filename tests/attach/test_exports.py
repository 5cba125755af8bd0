"""libesd.so exports exactly its ABI: the functions that esd/libesd.h marks
ESD_API, listed in the version node of runtime/libesd/libesd.map, and every
one the Python binding (runtime/python/esd) calls through ctypes. A new
export, or an internal name leaking out, fails here until the list in the
tree says so.

usage: test_exports.py LIBESD_SO SOURCE_DIR
"""
import glob
import os
import re
import shutil
import subprocess
import sys

NODE = "ESD_0.1"


def exported(lib):
    """Defined dynamic symbols of lib: {name: version or ''}."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                         check=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, sym = parts[-2], parts[-1]
        if kind == "A":  # a version node's own symbol
            continue
        name, _, ver = sym.partition("@")
        syms[name] = ver.lstrip("@")
    return syms


def map_names(path):
    """The global names of the version node NODE in a linker version script."""
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    m = re.search(re.escape(NODE) + r"\s*\{\s*global:(.*?)local:", text, re.S)
    if not m:
        sys.exit(f"FAIL: {path}: no node {NODE} with global: and local: parts")
    return {n.strip() for n in m.group(1).split(";") if n.strip()}


def header_names(path):
    return set(re.findall(r"^ESD_API\b[^(]*?\b(esd_\w+)\(", open(path).read(), re.M))


def binding_names(folder):
    names = set()
    for f in glob.glob(os.path.join(folder, "*.py")):
        names |= set(re.findall(r"\blib\.(esd_\w+)", open(f).read()))
    return names


def main():
    lib, src = sys.argv[1], sys.argv[2]
    if not shutil.which("nm"):
        print("SKIP: no nm (binutils) on this machine")
        return 77
    syms = exported(lib)
    listed = map_names(os.path.join(src, "runtime/libesd/libesd.map"))
    header = header_names(os.path.join(src, "include/esd/libesd.h"))
    binding = binding_names(os.path.join(src, "runtime/python/esd"))
    bad = []
    if set(syms) != listed:
        bad.append(f"{lib} exports names libesd.map does not list: {sorted(set(syms) - listed)}; "
                   f"listed but not exported: {sorted(listed - set(syms))}")
    if header != listed:
        bad.append(f"esd/libesd.h's ESD_API functions and libesd.map differ: header only "
                   f"{sorted(header - listed)}, map only {sorted(listed - header)}")
    if not binding:
        bad.append("found no lib.esd_* call in runtime/python/esd/*.py (the binding moved?)")
    if binding - set(syms):
        bad.append(f"the Python binding calls names {lib} does not export: "
                   f"{sorted(binding - set(syms))}")
    unversioned = sorted(n for n, v in syms.items() if v and v != NODE)
    if unversioned:
        bad.append(f"exports outside version node {NODE}: {unversioned}")
    for b in bad:
        print("FAIL: " + b)
    if not bad:
        print(f"ok: {len(syms)} exports, all in {NODE}; the binding uses {len(binding)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
