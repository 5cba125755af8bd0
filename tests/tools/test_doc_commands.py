"""Every command line that README.md, docs/*.md and bench/results/*.md
show for a project program uses options the program has: each `--option`
after the program's name must appear in what the program prints for
--help (its usage). A dry check: nothing is run but `--help`. Fails
naming the file, the line and the option.

    test_doc_commands.py SRC_DIR BIN_DIR
"""
import glob
import os
import re
import shlex
import subprocess
import sys

SRC, BIN = sys.argv[1], sys.argv[2]

# programs whose usage text is their --help output
PROGRAMS = ["esdd", "esd-ps", "esdctl", "esd-replay", "esd-data", "esd-trainer", "esd-info",
            "esd-solve", "esd-ref", "bench_cache", "bench_dispatch", "bench_gpu",
            "bench_policy", "bench_step", "bench_transport"]
# scripts: their usage is their header comment (and what they hand over to)
SCRIPTS = {
    "scripts/run.sh": ["tools/testbed/esd-testbed"],
    "scripts/test.sh": [],
    "scripts/build.sh": [],
    "scripts/fuzz.sh": [],
    "bench/gpu/on-device.sh": [],
    "tools/testbed/esd-testbed": [],
    "tools/launch/esd-launch": [],
    "tools/esd-export": [],
    "bench/runtime/bench_export.py": [],
    "bench/runtime/bench_trainers.py": [],
    "bench/runtime/bench_job_cpu.py": [],
}
SEPARATORS = {"|", "||", "&&", ";", ">", ">>", "2>&1", "#", "&"}


def help_text(prog):
    """What the program says about its options."""
    if prog in SCRIPTS:
        path = os.path.join(SRC, prog)
        text = open(path).read()
        if prog.endswith("esd-testbed"):
            text += subprocess.run([sys.executable, path, "--help"], capture_output=True,
                                   text=True, timeout=60).stdout
        for other in SCRIPTS[prog]:
            text += help_text(other)
        return text
    exe = os.path.join(BIN, prog)
    if not os.path.exists(exe):
        return None
    # a sanitizer build's leak report at exit must not swallow the usage
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60, env=env)
    return r.stdout + r.stderr


def program_of(tok):
    """The project program a token names, or None."""
    for s in SCRIPTS:
        if tok == s or tok.endswith("/" + s) or tok == "./" + s:
            return s
    base = os.path.basename(tok)
    if base in PROGRAMS and (tok == base or "bin/" in tok):
        return base
    return None


def command_lines(path):
    """(line number, text) of the code in a markdown file: fenced blocks,
    indented blocks and inline code spans."""
    fenced = False
    for no, line in enumerate(open(path), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") or line.startswith("\t"):
            yield no, line.strip()
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield no, span


def options_after(tokens, i):
    """The --options of the command whose program is tokens[i]."""
    opts = []
    for tok in tokens[i + 1:]:
        if tok in SEPARATORS or tok.startswith("#"):
            break
        if re.match(r"^--[a-z][a-z0-9-]*", tok):
            opts.append(re.match(r"^--[a-z][a-z0-9-]*", tok).group(0))
    return opts


def main():
    files = [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(SRC, "bench", "results", "*.md")))
    helps, bad, checked = {}, [], 0
    for path in files:
        for no, text in command_lines(path):
            try:
                tokens = shlex.split(text, comments=False)
            except ValueError:
                tokens = text.split()
            for i, tok in enumerate(tokens):
                prog = program_of(tok)
                if prog is None:
                    continue
                if prog not in helps:
                    helps[prog] = help_text(prog)
                usage = helps[prog]
                if usage is None:
                    continue  # not built here (e.g. an optional component)
                for opt in options_after(tokens, i):
                    checked += 1
                    if not re.search(re.escape(opt) + r"(?![a-z0-9-])", usage):
                        bad.append("%s:%d: %s has no option %s" %
                                   (os.path.relpath(path, SRC), no, prog, opt))
    for b in bad:
        print(b)
    print("doc commands: %d options checked, %d unknown" % (checked, len(bad)))
    if checked < 20:
        print("too few options found: the extraction is broken")
        return 1
    return 1 if bad else 0


sys.exit(main())
