"""References in code and docs lead somewhere a reader of the repository
can follow:

- nothing cites the design sketch outside the repository (its sections as
  "DESIGN" and a section sign) or a tracker's issue by number: the
  project's own docs/design.md is the reference;
- every "PAGE.md §N" (and a bare "§N" inside a page of docs/, which
  means that page) names a numbered section the page has ("## N. ...");
- every file path docs/design.md shows in backquotes exists, and every
  function its code walk (the last section) names is defined in the code.

Fails naming the file, the line and what is wrong.

    test_doc_refs.py SRC_DIR
"""
import os
import re
import sys

SRC = sys.argv[1]
TEXT_EXT = {".c", ".h", ".cu", ".cc", ".py", ".md", ".sh", ".txt", ".cmake", ".ini", ".esd"}
SKIP_DIRS = {".git", "__pycache__"}
SELF = os.path.abspath(__file__)

# built from pieces so that this file does not match itself
OUTSIDE = re.compile("DESIG" + r"N\s*\u00a7")
ISSUE = re.compile(r"\bissues?[ -]#?\d+", re.IGNORECASE)
PAGE_REF = re.compile(r"([\w./-]*\.md)`?\s*\u00a7\s*(\d+(?:\.\d+)*)((?:\s*,\s*\u00a7\s*\d+(?:\.\d+)*)*)")
BARE_REF = re.compile(r"\u00a7\s*(\d+(?:\.\d+)*)")
COMMENT_LEAD = re.compile(r"^\s*(\*|#|//)?\s*")
HEADING = re.compile(r"^#{2,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def text_files():
    for root, dirs, files in os.walk(SRC):
        dirs[:] = [d for d in dirs
                   if d not in SKIP_DIRS and not d.startswith("build") and "corpus" not in d]
        for f in files:
            path = os.path.join(root, f)
            ext = os.path.splitext(f)[1]
            if ext in TEXT_EXT:
                yield path
            elif not ext and os.access(path, os.X_OK):
                with open(path, "rb") as fh:
                    if fh.read(2) == b"#!":
                        yield path


def rel(path):
    return os.path.relpath(path, SRC)


_sections = {}


def sections(page):
    """The section numbers of docs page `page` (a path or a base name), or None."""
    for cand in (os.path.join(SRC, page), os.path.join(SRC, "docs", os.path.basename(page))):
        if os.path.isfile(cand):
            if cand not in _sections:
                _sections[cand] = set(HEADING.findall(open(cand, encoding="utf-8").read()))
            return _sections[cand]
    return None


def check_refs(path, lines, problems):
    in_docs = path.endswith(".md") and rel(path).startswith("docs" + os.sep)
    for no, line in enumerate(lines, 1):
        where = "%s:%d" % (rel(path), no)
        if OUTSIDE.search(line):
            problems.append("%s: cites the design sketch outside the repository: %s"
                            % (where, line.strip()))
        m = ISSUE.search(line)
        if m:
            problems.append("%s: cites a tracker's issue (%r): %s" % (where, m.group(0),
                                                                      line.strip()))
        # a reference may break across lines: read the line after the
        # previous one, comment leaders taken off
        prev = lines[no - 2] if no > 1 else ""
        cur = COMMENT_LEAD.sub("", line)
        ctx = prev + " " + cur
        off = len(prev) + 1
        taken = []
        for m in PAGE_REF.finditer(ctx):
            if m.end() <= off or m.start(2) < off:
                continue  # the previous line's own, or checked there
            taken.append((m.start() - off, m.end() - off))
            nums = [m.group(2)] + re.findall(r"\d+(?:\.\d+)*", m.group(3))
            have = sections(m.group(1))
            if have is None:
                problems.append("%s: %s names no page of the repository" % (where, m.group(1)))
                continue
            for n in nums:
                if n not in have:
                    problems.append("%s: %s has no section %s" % (where, m.group(1), n))
        if not in_docs:
            continue
        for m in BARE_REF.finditer(cur):
            if any(a <= m.start() < b for a, b in taken):
                continue
            before = (prev + " " + cur[:m.start()]).rstrip()
            word = re.search(r"(\w+)$", before)
            if word and word.group(1)[0].isupper():
                continue  # a paper's section (ESD, Herald)
            if m.group(1) not in sections(path):
                problems.append("%s: \u00a7%s: %s has no such section"
                                % (where, m.group(1), rel(path)))


def check_design(problems):
    page = os.path.join(SRC, "docs", "design.md")
    if not os.path.isfile(page):
        problems.append("docs/design.md is missing: the page the code's references name")
        return 0
    text = open(page, encoding="utf-8").read()
    for no, line in enumerate(text.split("\n"), 1):
        for tok in re.findall(r"`([^`\s]+)`", line):
            if "/" in tok and re.search(r"\.(c|h|cu|py|md)$", tok) and \
                    not os.path.exists(os.path.join(SRC, tok)) and \
                    not os.path.exists(os.path.join(SRC, "include", tok)):
                problems.append("docs/design.md:%d: %s does not exist" % (no, tok))
    walk = text[text.rfind("\n## "):]
    names = sorted({t for t in re.findall(r"`([a-z_][a-z0-9_]*)`", walk) if "_" in t})
    # definitions: a line that starts with a type and ends its declarator
    # at the name, then (
    defined = set()
    decl = re.compile(r"^[a-z][\w \t*]*?\b(\w+)\(", re.MULTILINE)
    for path in text_files():
        if os.path.splitext(path)[1] in (".c", ".h", ".cu"):
            defined.update(decl.findall(open(path, encoding="utf-8", errors="replace").read()))
    for name in names:
        if name not in defined:
            problems.append("docs/design.md: the code walk names %s, which no .c or .h "
                            "file defines" % name)
    return len(names)


def main():
    problems = []
    nfiles = 0
    for path in text_files():
        if os.path.abspath(path) == SELF:
            continue
        try:
            lines = open(path, encoding="utf-8").read().split("\n")
        except UnicodeDecodeError:
            continue
        nfiles += 1
        check_refs(path, lines, problems)
    nnames = check_design(problems)
    for p in problems:
        print(p)
    print("doc refs: %d files, %d functions of the code walk, %d problems"
          % (nfiles, nnames, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
