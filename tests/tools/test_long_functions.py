"""A function of the project's code (not tests or benchmarks) longer than
80 lines carries a reason in the comment above it: a line starting with
"Long:" saying why it is one piece (docs/conventions.md). Fails naming
each function that has none.

    test_long_functions.py SRC_DIR
"""
import glob
import os
import re
import sys

LIMIT = 80
SRC = sys.argv[1]
HEAD = re.compile(r"^(static|int|void|const|struct|uint|bool|double|float|char|size_t|int64|"
                  r"esd_|extern|__global|__device|__attribute__|json|enum|unsigned|long)")


def functions(path):
    """(name, first line, body lines, comment above) of each function whose
    body opens with a '{' alone at column 0."""
    lines = open(path, errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            j = i - 1
            while j > 0 and lines[j] and not HEAD.match(lines[j]):
                j -= 1
            k = i + 1
            while k < len(lines) and lines[k] != "}":
                k += 1
            # the comment right above the head (and attributes/#if lines)
            c = j - 1
            while c >= 0 and (lines[c].startswith(("#", "__attribute__"))):
                c -= 1
            above = []
            while c >= 0 and (lines[c].startswith(("/*", " *")) or lines[c].endswith("*/")):
                above.insert(0, lines[c])
                c -= 1
            m = re.search(r"(\w+)\s*\(", lines[j])
            yield (m.group(1) if m else lines[j][:40]), j + 1, k - i - 1, "\n".join(above)
            i = k
        i += 1


def main():
    bad = checked = 0
    for path in sorted(glob.glob(os.path.join(SRC, "**", "*.c"), recursive=True) +
                       glob.glob(os.path.join(SRC, "**", "*.cu"), recursive=True)):
        rel = os.path.relpath(path, SRC)
        if rel.startswith(("build", "tests/", "bench/", "examples/")):
            continue
        for name, line, length, above in functions(path):
            checked += 1
            if length > LIMIT and not re.search(r"(^|\n)[ /]\*+ ?Long:", above):
                print("%s:%d: %s is %d lines and says no reason (a 'Long:' line above it)"
                      % (rel, line, name, length))
                bad += 1
    print("long functions: %d functions checked, %d without a reason" % (checked, bad))
    return 1 if bad else 0


sys.exit(main())
