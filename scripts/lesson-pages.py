#!/usr/bin/env python3
"""lesson-pages.py — each lesson page's "## Results" is the lesson's real output.

  scripts/lesson-pages.py update [--timings] [NAME...]   (make lesson-pages [TIMINGS=1]) runs each
      lesson of lessons/lessons.txt (or the NAMEs) at its rank count and writes its output into its
      page, in the fenced block after the line "`mpirun -np N build/bin/lesson_NAME`:", and copies
      the pictures the lesson wrote (every build/lesson_*.svg its output names) beside the page,
      where the page shows them as ![...](lesson_....svg). A block that differs from the output
      only in timings (the rules below) is left as it is, so that the numbers the page's text
      quotes stay; --timings rewrites it too. The pictures are copied when the block is rewritten
      or when they are missing. A lesson that does not end in PASSED leaves its page alone.
  scripts/lesson-pages.py check NAME LOG    (make test) compares LOG, the output of one run of
      lesson NAME, with its page: exit 0 when they agree, else a diff and exit 1.
  scripts/lesson-pages.py normalize FILE     prints FILE as the comparison sees it.
  scripts/lesson-pages.py selftest LOGDIR    (make test) that the comparison can fail: for every
      lesson with a LOGDIR/lesson_NAME.log that matches its page, a copy of the block with one
      digit changed on a compared line must differ, and one with a timing number changed must not.

The comparison is exact except for what changes from run to run or machine to machine:

  1. times and rates: a number followed by a time or rate unit (ns, us, µs, ms, s, GB/s, MB/s,
     tok/s, tokens/s) becomes "#"; on a line that has one, so do the numbers followed by "%" or "×"
     (shares and ratios of those times, e.g. lesson 11's "hidden" and "step vs none" columns);
  2. timing tables in the nccl-tests layout (lesson 10's step 6): a "#" line of column names, then
     a "#" line of units in parentheses under them, then rows of numbers; in those rows the columns
     whose unit is a time or a rate ("(us)", "(GB/s)") become "#" (the others, such as the size and
     "#wrong", are compared);
  3. the machine: the MPI library's version ("mpi (MPICH 4.0.2)") and the OpenMP thread count
     ("openmp x2");
  4. spacing: on table lines (starting with "|") and on the lines rules 1 and 2 changed, runs of spaces,
     and of "-" in a table's rule line, count as one (a column's width follows its widest cell,
     which may be a time); trailing spaces are ignored everywhere.

Every other character, number and line must be the same.

MPIEXEC and MPI_FLAGS (scripts/common.sh) say how to start a lesson; BUILD where its binary is.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUILD = os.environ.get("BUILD", "build")

NUMBER = re.compile(r"(?<![\w.#])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_NUM = r"(?<![\w.#])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
TIMED = re.compile(_NUM + r"(?=\s?(?:ns|us|µs|ms|s|GB/s|MB/s|tok/s|tokens/s)(?![\w/]))")
SHARE = re.compile(_NUM + r"(?=\s?[%×])")
NCCL_HEADER = re.compile(r"^#.*\((?:ns|us|µs|ms|s|GB/s|MB/s)\)")
NUMERIC_ROW = re.compile(r"^[\s\d.eE+-]+$")
MACHINE = [
    (re.compile(r"\b(mpi) \((?:MPICH|Open MPI|Intel\(R\) MPI|MVAPICH)[^)]*\)"), r"\1 (MPI #)"),
    (re.compile(r"\bopenmp x\d+"), "openmp x#"),
]


def normalize(lines):
    """The lines as the comparison sees them (see the module's comment)."""
    out, timed_cols, prev = [], None, ""
    for line in lines:
        line = line.rstrip()
        for pat, rep in MACHINE:
            line = pat.sub(rep, line)
        if NCCL_HEADER.match(line):
            timed_cols = nccl_timed_columns(prev, line)
        elif timed_cols is not None and not (NUMERIC_ROW.match(line) and line.strip()):
            timed_cols = None
        prev = line
        timing = timed_cols is not None and not line.startswith("#")
        if timing:
            cells = line.split()
            if len(cells) == timed_cols[0]:
                line = " " + " ".join("#" if i in timed_cols[1] else c for i, c in enumerate(cells))
            else:  # not the header's layout: nothing on the row is compared
                line = NUMBER.sub("#", line)
        elif TIMED.search(line):
            line = SHARE.sub("#", TIMED.sub("#", line))
            timing = True
        if timing or line.startswith("|"):
            line = re.sub(r" +", " ", line)
            if re.fullmatch(r"[|\-: ]+", line):
                line = re.sub(r"-+", "-", line)
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return out


def nccl_timed_columns(names, units):
    """(number of columns, {indices of the columns whose unit is a time or a rate}) from a line of
    column names and the line of units under it (each unit right-aligned with its name)."""
    ends = [m.end() for m in re.finditer(r"\S+", names[1:])]
    timed = set()
    for m in re.finditer(r"\((ns|us|µs|ms|s|GB/s|MB/s)\)", units[1:]):
        if m.end() in ends:
            timed.add(ends.index(m.end()))
    return len(ends), timed


def lessons():
    rows = []
    with open(os.path.join(ROOT, "lessons", "lessons.txt"), encoding="utf-8") as fh:
        for line in fh:
            f = line.split()
            if len(f) == 2 and not line.startswith("#"):
                rows.append((f[0], int(f[1])))
    return rows


def page_path(name):
    return os.path.join(ROOT, "lessons", name, "README.md")


def find_block(text, name):
    """(start, end) line indices of the output block's content in the page, or an error string."""
    lines = text.split("\n")
    cmd = re.compile(r"^`mpirun(?:\.\w+)? -np \d+ build/bin/lesson_" + re.escape(name) + r"`:\s*$")
    for i, line in enumerate(lines):
        if cmd.match(line):
            j = i + 1
            while j < len(lines) and lines[j].strip() == "":
                j += 1
            if j >= len(lines) or not lines[j].startswith("```"):
                return f"no ``` block after the line {line!r}"
            k = j + 1
            while k < len(lines) and not lines[k].startswith("```"):
                k += 1
            if k >= len(lines):
                return "the output block is not closed"
            return j + 1, k
    return f"no line \"`mpirun -np N build/bin/lesson_{name}`:\" followed by the output block"


def page_output(name):
    with open(page_path(name), encoding="utf-8") as fh:
        text = fh.read()
    where = find_block(text, name)
    if isinstance(where, str):
        return where
    lines = text.split("\n")
    return lines[where[0]:where[1]]


def check(name, log, page=None):
    rel = os.path.relpath(page_path(name), ROOT)
    page = page_output(name) if page is None else page
    if isinstance(page, str):
        print(f"lesson {name}: {rel}: {page}")
        return 1
    with open(log, encoding="utf-8", errors="replace") as fh:
        got = fh.read().split("\n")
    a, b = normalize(page), normalize(got)
    if a == b:
        return 0
    diff = list(difflib.unified_diff(a, b, f"{rel} (its Results block)", f"the output of lesson_{name}",
                                     n=1, lineterm=""))
    print(f"lesson {name}: its page differs from its output ('#': a timing number, not compared); "
          f"run make lesson-pages")
    for line in diff[:60]:
        print("    " + line)
    if len(diff) > 60:
        print(f"    … {len(diff) - 60} more diff lines")
    return 1


def selftest(logdir):
    """For each lesson whose log matches its page: one changed digit on a compared line must be
    caught, one changed timing number must not. Prints one line per lesson; exit 1 on a miss."""
    bad, tried = 0, 0
    for name, _ in lessons():
        log = os.path.join(logdir, f"lesson_{name}.log")
        page = page_output(name)
        if not os.path.isfile(log) or isinstance(page, str):
            continue
        with open(log, encoding="utf-8", errors="replace") as fh:
            got = fh.read().split("\n")
        if normalize(page) != normalize(got):
            continue
        tried += 1
        norm = normalize(page)
        strict = timed = None
        half = len(page) // 2  # prefer a line from the middle of the output to its title
        for i in list(range(half, len(page))) + list(range(half)):
            line = page[i]
            digits = [m.start() for m in re.finditer(r"\d", line)]
            for d in digits:
                mutated = line[:d] + str((int(line[d]) + 1) % 10) + line[d + 1:]
                changed = normalize(page[:i] + [mutated] + page[i + 1:]) != norm
                if changed and strict is None:
                    strict = (i, mutated)
                if not changed and timed is None and TIMED.search(line):
                    timed = (i, mutated)
            if strict and timed:
                break
        if strict is None:
            bad += 1
            print(f"✗ lesson {name}: no digit of its page is compared (changing any is not caught)")
        for what, case, must_differ in (("a compared digit", strict, True), ("a timing number", timed, False)):
            if case is None:
                continue
            i, mutated = case
            copy = page[:i] + [mutated] + page[i + 1:]
            with open(os.devnull, "w") as null:
                old, sys.stdout = sys.stdout, null
                try:
                    rc = check(name, log, copy)
                finally:
                    sys.stdout = old
            if (rc != 0) != must_differ:
                bad += 1
                print(f"✗ lesson {name}: changing {what} in its page ({mutated.strip()[:60]!r}) was "
                      f"{'not caught' if must_differ else 'reported as a difference'}")
    print(f"{'✗' if bad or not tried else '✓'} page check: on {tried} lessons' pages a changed digit is "
          f"caught and a changed timing number is not" + (f" ({bad} misses)" if bad else ""))
    return 1 if bad or not tried else 0


def run(name, np):
    mpiexec = os.environ.get("MPIEXEC", "mpirun")
    flags = os.environ.get("MPI_FLAGS", "").split()
    cmd = [mpiexec, *flags, "-np", str(np), os.path.join(BUILD, "bin", "lesson_" + name)]
    r = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=600)
    return r.returncode, r.stdout


def update(args):
    timings = "--timings" in args
    names = [a for a in args if a != "--timings"]
    table = lessons()
    if names:
        unknown = [n for n in names if n not in dict(table)]
        if unknown:
            print(f"✗ not in lessons/lessons.txt: {', '.join(unknown)}")
            return 2
        table = [(n, np) for n, np in table if n in names]
    bad = 0
    for name, np in table:
        rel = os.path.relpath(page_path(name), ROOT)
        with open(page_path(name), encoding="utf-8") as fh:
            text = fh.read()
        where = find_block(text, name)
        if isinstance(where, str):
            print(f"✗ {rel}: {where}")
            bad += 1
            continue
        t0 = time.time()
        rc, out = run(name, np)
        secs = time.time() - t0
        last = [x for x in out.split("\n") if x.startswith(("PASSED", "FAILED"))]
        if rc != 0 or not last or not last[-1].startswith("PASSED"):
            print(f"✗ lesson {name} (-np {np}) exited {rc}{': ' + last[-1] if last else ''}: "
                  f"{rel} left as it was")
            bad += 1
            continue
        lines = text.split("\n")
        old = lines[where[0]:where[1]]
        body = [x.rstrip() for x in out.rstrip("\n").split("\n")]
        if body == [x.rstrip() for x in old]:
            what, write = "unchanged", False
        elif normalize(body) == normalize(old):
            what, write = ("timings rewritten", True) if timings else ("unchanged but for timings (kept)", False)
        else:
            what, write = "updated", True
        new = "\n".join(lines[:where[0]] + body + lines[where[1]:])
        if write:
            with open(page_path(name), "w", encoding="utf-8") as fh:
                fh.write(new)
        # The pictures: every …/lesson_*.svg the output names, copied beside the page.
        pictures = []
        for p in sorted(set(re.findall(r"(?<![\w/])((?:[\w.-]+/)*lesson_\w+\.svg)", out))):
            src, base = os.path.join(ROOT, p), os.path.basename(p)
            dst = os.path.join(ROOT, "lessons", name, base)
            if os.path.isfile(src) and (write or not os.path.isfile(dst)):
                shutil.copyfile(src, dst)
                pictures.append(base)
            if f"]({base})" not in new:
                print(f"  · {rel} does not show {base} (add ![caption]({base}) under its Results)")
        pics = f"; pictures copied: {', '.join(pictures)}" if pictures else ""
        print(f"✓ lesson {name} (-np {np}, {secs:.1f} s): {rel} {what}{pics}")
    return 1 if bad else 0


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    if args[0] == "update":
        return update(args[1:])
    if args[0] == "check" and len(args) == 3:
        return check(args[1], args[2])
    if args[0] == "selftest" and len(args) == 2:
        return selftest(args[1])
    if args[0] == "normalize" and len(args) == 2:
        with open(args[1], encoding="utf-8", errors="replace") as fh:
            print("\n".join(normalize(fh.read().split("\n"))))
        return 0
    print("usage: scripts/lesson-pages.py update [--timings] [NAME...] | check NAME LOG | normalize FILE"
          " | selftest LOGDIR")
    return 2


if __name__ == "__main__":
    sys.exit(main())
