#!/usr/bin/env python3
"""lesson-pages.py — each lesson page's "## Results" is the lesson's real output.

  scripts/lesson-pages.py update [--timings] [NAME...]   (make lesson-pages [TIMINGS=1]) runs each
      lesson of lessons/lessons.txt (or the NAMEs) at its rank count and writes its output into its
      page, in the fenced block after the line "`mpirun -np N build/bin/lesson_NAME`:", and copies
      the pictures the lesson wrote (every build/lesson_*.svg its output names) beside the page,
      where the page shows them as ![...](lesson_....svg). A block that agrees with the output
      (the rules below: timings, rounding) is left as it is, so that the numbers the page's text
      quotes stay; --timings rewrites it too. The pictures are copied when the block is rewritten
      or when they are missing. A lesson that does not end in PASSED leaves its page alone.
  scripts/lesson-pages.py check NAME LOG    (make test) compares LOG, the output of one run of
      lesson NAME, with its page: exit 0 when they agree, else a diff and exit 1.
  scripts/lesson-pages.py normalize FILE     prints FILE as the comparison sees it.
  scripts/lesson-pages.py selftest LOGDIR    (make test) that the comparison can fail: for every
      lesson with a LOGDIR/lesson_NAME.log that matches its page, a copy of the block with a value
      moved beyond the tolerance, an integer changed by one, a word changed, or a difference raised
      above its printed tolerance must differ; one with a last-digit rounding change, a timing
      number changed, or a difference replaced by another below its tolerance must not.

The comparison is by meaning, not by digits: what changes from run to run or machine to machine is
set aside (rules 1-4), and the numbers that are left compare by what they are (rules 5-7).

  1. times and rates: a number followed by a time or rate unit (ns, us, µs, ms, s, GB/s, MB/s,
     tok/s, tokens/s) becomes "#"; on a line that has one, so do the numbers followed by "%" or "×"
     (shares and ratios of those times, e.g. lesson 11's "hidden" and "step vs none" columns);
  2. timing tables in the nccl-tests layout (lesson 10's step 6): a "#" line of column names, then
     a "#" line of units in parentheses under them, then rows of numbers; in those rows the columns
     whose unit is a time or a rate ("(us)", "(GB/s)") become "#" (the others, such as the size and
     "#wrong", are compared);
  3. the machine: the MPI library's version ("mpi (MPICH 4.0.2)") and the OpenMP thread count
     ("openmp x2");
  4. spacing: runs of spaces count as one (a column's width follows its widest cell, which may be a
     time or a value printed with one digit more), and so do runs of "-" in a table's rule line;
     trailing spaces are ignored;
  5. integers (no "." and no exponent: counts, bytes, shapes, ranks, steps) match exactly;
  6. floating values (with a "." or an exponent) match when |page - output| <= RTOL * max(|page|,
     |output|) + ATOL, RTOL = 1e-5 and ATOL = 1e-6: fp32 results agree to about 1e-7 relative, but
     OpenBLAS picks its kernels by CPU (OPENBLAS_CORETYPE), sums in another order, and a printed
     last digit (six significant digits) moves; ATOL is for values near 0 (a 0.00e+00 that is
     8.18e-08 elsewhere, a small element of a vector of O(1) values); a value printed with five
     significant digits, or four, may also move by one unit of its last digit (lesson 14's bf16
     losses, printed to 3 decimals: the CPU's bf16 GEMM is oneDNN's AMX kernel on one CPU, its
     AVX512-BF16 one on another and widened sgemm on a third, and bf16's rounding carries the
     order of their sums into the 4th decimal: 3.8245, 3.8242);
  7. a difference or error printed beside its tolerance, on a line with the word "difference" or
     "error" and "tolerance T" / "rtol T" / "tol T" ("largest relative difference over 20 steps
     1.13e-07 (tolerance 1.00e-04)"): a floating value after that word matches any value that is
     also below T (the page says "below T", not which rounding error the machine made).

Every other character and line must be the same: words, PASSED lines, the order of the lines.

MPIEXEC and MPI_FLAGS (scripts/common.sh) say how to start a lesson; BUILD where its binary is.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys
import time

from lesson_table import lessons

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUILD = os.environ.get("BUILD", "build")

NUMBER = re.compile(r"(?<![\w.#])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
_NUM = r"(?<![\w.#])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
TIMED = re.compile(_NUM + r"(?=\s?(?:ns|us|µs|ms|s|GB/s|MB/s|tok/s|tokens/s)(?![\w/]))")
SHARE = re.compile(_NUM + r"(?=\s?[%×])")
NCCL_HEADER = re.compile(r"^#.*\((?:ns|us|µs|ms|s|GB/s|MB/s)\)")
NUMERIC_ROW = re.compile(r"^[\s\d.eE+-]+$")
# Rules 5-7: the numbers left after normalize(). VALUE is a number standing alone (not part of a
# name such as lesson_05 or x2, a version such as 0.3.21, or 4L); it may end a sentence ("… 3.5.").
VALUE = re.compile(r"(?<![\w.#])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?!\w|\.\d)")
RTOL, ATOL = 1e-5, 1e-6
TOLERANCE = re.compile(r"\b(?:tolerance|rtol|tol)\b[\s=:]*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
DIFFERENCE = re.compile(r"\b(?:differences?|errors?)\b", re.I)
RULES = (f"'#': a timing number, not compared; integers compared exactly, floating values within "
         f"relative {RTOL:g} + absolute {ATOL:g}, a difference below its printed tolerance as below it")
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


def page_path(name):
    return os.path.join(ROOT, "lessons", name, "README.md")


def find_block(text, name):
    """(start, end) line indices of the output block's content in the page, or an error string."""
    lines = text.split("\n")
    # Launch flags (a lessons.txt launch column, e.g. two simulated nodes) may precede -np.
    cmd = re.compile(r"^`mpirun(?:\.\w+)?(?: [^`]*?)? -np \d+ build/bin/lesson_" + re.escape(name) +
                     r"`:\s*$")
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


def is_float(text):
    return "." in text or "e" in text or "E" in text


def skeleton(line):
    """The line as rules 4-7 see its words: each value replaced by one mark, runs of spaces by one."""
    return re.sub(r" +", " ", VALUE.sub("\0", line))


def difference_limit(line, m):
    """T when the value m (a VALUE match on line) is a difference printed beside its tolerance T
    (rule 7), else None."""
    tol = TOLERANCE.search(line)
    if not tol or m.start() == tol.start(1) or not is_float(m.group()):
        return None
    if not DIFFERENCE.search(line, 0, m.start()):
        return None
    return abs(float(tol.group(1)))


def value_mismatch(page_line, out_line):
    """None when two lines with the same skeleton agree by rules 5-7, else what differs."""
    for a, b in zip(VALUE.finditer(page_line), VALUE.finditer(out_line)):
        x, y = a.group(), b.group()
        if not is_float(x) and not is_float(y):
            if x != y:
                return f"{x} is {y} (an integer: compared exactly)"
            continue
        p, q = float(x), float(y)
        limit = difference_limit(page_line, a)
        if limit is not None and abs(p) < limit and abs(q) < limit:
            continue
        if not abs(p - q) <= max(RTOL * max(abs(p), abs(q)) + ATOL, last_digit(x), last_digit(y)):
            far = abs(p - q) / max(abs(p), abs(q))
            return f"{x} is {y} (relative difference {far:.1e})"
    return None


def compare(page, out):
    """(the page's lines, the output's lines, notes) as the comparison sees them: normalized, and each
    output line that agrees with the page line it stands against (rules 5-7) replaced by that line,
    so that the two lists are equal exactly when the page agrees with the output."""
    a, b = normalize(page), normalize(out)
    seen, notes = list(b), []
    matcher = difflib.SequenceMatcher(None, [skeleton(x) for x in a], [skeleton(x) for x in b], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            continue
        for i, j in zip(range(i1, i2), range(j1, j2)):
            why = value_mismatch(a[i], b[j])
            if why is None:
                seen[j] = a[i]
            else:
                notes.append(f"output line {j + 1}: {why}")
    return a, seen, notes


def agrees(page, out):
    a, seen, _ = compare(page, out)
    return a == seen


def check(name, log, page=None):
    rel = os.path.relpath(page_path(name), ROOT)
    page = page_output(name) if page is None else page
    if isinstance(page, str):
        print(f"lesson {name}: {rel}: {page}")
        return 1
    with open(log, encoding="utf-8", errors="replace") as fh:
        got = fh.read().split("\n")
    a, seen, notes = compare(page, got)
    if a == seen:
        return 0
    diff = list(difflib.unified_diff(a, seen, f"{rel} (its Results block)", f"the output of lesson_{name}",
                                     n=1, lineterm=""))
    print(f"lesson {name}: its page differs from its output ({RULES}); run make lesson-pages")
    for line in diff[:60]:
        print("    " + line)
    if len(diff) > 60:
        print(f"    … {len(diff) - 60} more diff lines")
    for note in notes[:10]:
        print(f"    value: {note}")
    return 1


# ---- the self-test: the comparison catches what it must and lets pass what it must ---------------


def compared_lines(page):
    """The indices of the page's lines that rules 1-3 leave whole (no timing, no machine), middle
    first (the title and the PASSED line are the least interesting)."""
    norm = normalize(page)
    squash = lambda x: re.sub(r" +", " ", x.rstrip())  # noqa: E731
    keep = [i for i in range(len(norm)) if page[i].strip() and squash(norm[i]) == squash(page[i])]
    half = len(page) // 2
    return [i for i in keep if i >= half] + [i for i in keep if i < half]


def last_digit(text):
    """One unit of the last printed digit of a value printed with four or five significant digits
    (3.825: 1e-3; 3.8245: 1e-4), else 0: such a value's last digit may move by one where a rounding
    upstream differs (a bf16 loss, whose GEMMs sum in another order on another CPU): by at most
    1e-3 of the value with four digits, 1e-4 with five; the self-test's "moved beyond the
    tolerance" moves such a value by three units.
    Six digits and more are within RTOL already; three and fewer are compared as printed."""
    if significant(text) not in (4, 5):
        return 0.0
    mantissa, _, exponent = text.lstrip("+-").partition("e" if "e" in text else "E")
    decimals = len(mantissa.partition(".")[2])
    return 1.000001 * 10.0 ** (int(exponent or 0) - decimals)


def significant(text):
    """The number of significant digits of a printed value."""
    mantissa = re.split(r"[eE]", text.lstrip("+-"))[0].replace(".", "").lstrip("0")
    return len(mantissa)


def mutations(page):
    """{kind: (line index, mutated line)}: one page change of each kind the self-test tries, where the
    page has one. Each kind's first value says whether the comparison must catch it."""
    found = {}

    def offer(kind, i, line, m, text):
        if kind not in found:
            found[kind] = (i, line[:m.start()] + text + line[m.end():])

    for i in compared_lines(page):
        line = page[i]
        for m in VALUE.finditer(line):
            x = m.group()
            limit = difference_limit(line, m)
            if not is_float(x):
                offer("a count changed by one", i, line, m, str(int(x) + 1))
            elif limit is not None and abs(float(x)) < limit:
                offer("a difference raised above its tolerance", i, line, m, f"{10 * limit:.2e}")
                offer("a difference replaced by another below its tolerance", i, line, m, f"{limit / 2:.2e}")
            elif limit is None:
                v = float(x)
                offer("a value moved beyond the tolerance", i, line, m,
                      f"{v + max(10 * (RTOL * abs(v) + ATOL), 3 * last_digit(x)):.9g}")
                if significant(x) >= 6:
                    head, digits, tail = re.match(r"(.*?)(\d)((?:[eE][-+]?\d+)?)$", x).groups()
                    offer("a last-digit rounding change", i, line, m,
                          head + ("8" if digits == "9" else str(int(digits) + 1)) + tail)
        for m in re.finditer(r"\b[A-Za-z]{4,}\b", line):
            w = m.group()
            offer("a word changed", i, line, m, w[0] + ("y" if w[1] == "x" else "x") + w[2:])
    for i, line in enumerate(page):
        m = TIMED.search(line)
        if m and "a timing number changed" not in found:
            d = m.end() - 1  # the number's last digit
            found["a timing number changed"] = (i, line[:d] + str((int(line[d]) + 1) % 10) + line[d + 1:])
    return found


CAUGHT = ("a value moved beyond the tolerance", "a count changed by one", "a word changed",
          "a difference raised above its tolerance")
PASSED_OVER = ("a last-digit rounding change", "a timing number changed",
               "a difference replaced by another below its tolerance")


def selftest(logdir):
    """For each lesson whose log agrees with its page: each change of CAUGHT must be caught, each of
    PASSED_OVER must not. Prints one line per lesson; exit 1 on a miss or a kind never tried."""
    bad, tried, logged, counts = 0, 0, 0, {kind: 0 for kind in CAUGHT + PASSED_OVER}
    for name, _ in lessons():
        log = os.path.join(logdir, f"lesson_{name}.log")
        page = page_output(name)
        if not os.path.isfile(log) or isinstance(page, str):
            continue
        logged += 1
        with open(log, encoding="utf-8", errors="replace") as fh:
            got = fh.read().split("\n")
        if not agrees(page, got):
            print(f"· lesson {name}: its page differs from its output, so it is not tried here")
            continue
        tried += 1
        done = []
        for kind, (i, mutated) in mutations(page).items():
            must_differ = kind in CAUGHT
            counts[kind] += 1
            if agrees(page[:i] + [mutated] + page[i + 1:], got) == must_differ:
                bad += 1
                print(f"✗ lesson {name}: {kind} ({mutated.strip()[:70]!r}) was "
                      f"{'not caught' if must_differ else 'reported as a difference'}")
            else:
                done.append(kind)
        print(f"  lesson {name}: tried {', '.join(done) if done else 'nothing'}")
    # A kind no page offers is a miss when every page was tried (with fewer, the page that has it
    # may be one that differs, which make test reports already).
    never = [kind for kind, n in counts.items() if n == 0] if tried == logged else []
    for kind in never:
        print(f"✗ no lesson's page has a line where {kind} could be tried")
    ok = not bad and not never and tried
    caught = ", ".join(f"{kind} ({counts[kind]})" for kind in CAUGHT)
    passed = ", ".join(f"{kind} ({counts[kind]})" for kind in PASSED_OVER)
    print(f"{'✓' if ok else '✗'} page check, on {tried} lessons' pages: caught: {caught}; not caught: "
          f"{passed}" + (f" ({bad} misses)" if bad else ""))
    return 0 if ok else 1


def launch_flags(name, np):
    """The mpirun flags of lesson NAME's launch column (scripts/common.sh, lesson_launch_flags):
    (True, flags), or (False, why it cannot run here)."""
    r = subprocess.run(["bash", "-c", '. scripts/common.sh && lesson_launch_flags "$0" "$1"', name,
                        str(np)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout.strip()


def run(name, np):
    mpiexec = os.environ.get("MPIEXEC", "mpirun")
    ok, launch = launch_flags(name, np)
    if not ok:
        return 2, launch
    flags = os.environ.get("MPI_FLAGS", "").split() + launch.split()
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
        elif agrees(old, body):
            what, write = (("timings and rounding rewritten", True) if timings
                           else ("unchanged but for timings and rounding (kept)", False))
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
