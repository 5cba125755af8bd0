"""docs/glossary.md covers every public header: each include/esd/NAME.h is
named there (as esd/NAME.h) beside the terms it defines, and README links
the glossary. Fails naming what is missing.

    test_glossary.py SRC_DIR
"""
import glob
import os
import sys

SRC = sys.argv[1]
gloss = open(os.path.join(SRC, "docs", "glossary.md")).read()
missing = [os.path.basename(h) for h in sorted(glob.glob(os.path.join(SRC, "include", "esd", "*.h")))
           if "esd/" + os.path.basename(h) not in gloss]
for m in missing:
    print("docs/glossary.md names no term of esd/%s" % m)
if "docs/glossary.md" not in open(os.path.join(SRC, "README.md")).read():
    print("README.md does not link docs/glossary.md")
    missing.append("README")
print("glossary: %d headers missing" % len(missing))
sys.exit(1 if missing else 0)
