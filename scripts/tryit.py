#!/usr/bin/env python3
"""tryit.py — the "## Try it" problems of the lesson pages answer with what a program prints.

Each lesson page (lessons/NN_name/README.md) may end with a "## Try it" section: two or three
problems, each a question and its folded answer,

    <details><summary>Answer</summary>

    ```
    $ mpirun -np 4 build/bin/lesson_03_row_parallel
      … the line(s) the program prints that answer the question …
    ```

    Why that is the answer.

    </details>

The fenced block's first line is the command ("$ " then mpirun … or build/bin/…); the lines under
it are lines of its output, in the order it prints them (others may come between; a line "…"
stands for them and is not looked for). An answer without such a block is an error, and so is one
whose lines hold no number: the answer is the program's number, not the page's.

  scripts/tryit.py check [NAME...]   (make test: scripts/tests/tryit.sh) runs each answer's
      command (once, however many answers quote it) and looks for the quoted lines in its output,
      compared as scripts/lesson-pages.py compares a page's Results with a run (timings aside,
      integers exactly, floating values within its tolerances); exit 0 when every one is found.
  scripts/tryit.py selftest [NAME...]   the same, then that the comparison can fail: in each
      answer a count changed by one or a value moved beyond the tolerance (and a word changed)
      must no longer be found, a last-digit rounding change must still be.

MPIEXEC and MPI_FLAGS (scripts/common.sh) say how to start mpirun; BUILD where build/bin is.
"""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import time

from lesson_table import lessons

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BUILD = os.environ.get("BUILD", "build")
_spec = importlib.util.spec_from_file_location("lesson_pages", os.path.join(ROOT, "scripts", "lesson-pages.py"))
pages = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pages)

SKIPPED = ("…", "...")


def problems(name):
    """[(number, command, [quoted lines])] of lesson NAME's "## Try it", or an error string; [] when
    the page has no such section."""
    with open(pages.page_path(name), encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    start = next((i for i, x in enumerate(lines) if x.strip() == "## Try it"), None)
    if start is None:
        return []
    out, i, n = [], start + 1, 0
    while i < len(lines) and not lines[i].startswith("## "):
        if lines[i].startswith("<details>"):
            n += 1
            end = next((k for k in range(i, len(lines)) if lines[k].startswith("</details>")), None)
            if end is None:
                return f"answer {n}: <details> is not closed"
            fence = next((k for k in range(i, end) if lines[k].startswith("```")), None)
            close = next((k for k in range(fence + 1, end) if lines[k].startswith("```")), None) if fence else None
            if close is None or not lines[fence + 1].startswith("$ "):
                return f"answer {n}: no ``` block opening with \"$ command\""
            quoted = [x for x in lines[fence + 2:close] if x.strip() not in SKIPPED]
            if not any(pages.VALUE.search(x) for x in quoted):
                return f"answer {n}: quotes no number the program prints"
            out.append((n, lines[fence + 1][2:].strip(), quoted))
            i = end
        i += 1
    return out


def argv(command):
    """The command as it runs here: mpirun as MPIEXEC with MPI_FLAGS, build/ as BUILD; only a
    program of build/bin, under mpirun or alone, is run."""
    words = shlex.split(command)
    if words and words[0] == "mpirun":
        words = [os.environ.get("MPIEXEC", "mpirun"), *os.environ.get("MPI_FLAGS", "").split(), *words[1:]]
        prog = next((w for w in words if w.startswith("build/bin/")), None)
    else:
        prog = words[0] if words else None
    if not prog or not prog.startswith("build/bin/"):
        return None
    return [os.path.join(BUILD, w[len("build/"):]) if w == prog else w for w in words]


def run(command, cache):
    """The output of COMMAND (stdout and stderr), run once per distinct command."""
    if command not in cache:
        cmd = argv(command)
        if cmd is None:
            cache[command] = None
        else:
            r = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=300)
            cache[command] = r.stdout.split("\n")
    return cache[command]


def missing(quoted, output):
    """None when the quoted lines are in the output in order (lesson-pages.py's comparison), else
    the first one that is not."""
    got = pages.normalize(output)
    at = 0
    for q in pages.normalize(quoted):
        want = pages.skeleton(q)
        at = next((j + 1 for j in range(at, len(got))
                   if pages.skeleton(got[j]) == want and pages.value_mismatch(q, got[j]) is None), None)
        if at is None:
            return q
    return None


def selftest_one(quoted, output):
    """[(kind, mutated line)] of the changes the comparison got wrong; and the kinds tried."""
    wrong, tried = [], []
    for kind, (i, mutated) in pages.mutations(quoted).items():
        if kind not in pages.CAUGHT + pages.PASSED_OVER:
            continue
        caught = missing(quoted[:i] + [mutated] + quoted[i + 1:], output) is not None
        tried.append(kind)
        if caught != (kind in pages.CAUGHT):
            wrong.append((kind, mutated))
    return wrong, tried


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("check", "selftest"):
        print(__doc__)
        return 0 if args and args[0] in ("-h", "--help") else 2
    self = args[0] == "selftest"
    names = args[1:] or [n for n, _ in lessons()]
    cache, bad, done, t0 = {}, 0, [], time.time()
    counts = {}
    for name in names:
        found = problems(name)
        if isinstance(found, str):
            print(f"✗ lessons/{name}/README.md, Try it: {found}")
            bad += 1
            continue
        for n, command, quoted in found:
            output = run(command, cache)
            where = f"lessons/{name}/README.md, Try it, answer {n} ($ {command})"
            if output is None:
                print(f"✗ {where}: not a program of build/bin")
                bad += 1
                continue
            lost = missing(quoted, output)
            if lost is not None:
                print(f"✗ {where}: its output has no line {lost.strip()!r} ({pages.RULES})")
                bad += 1
                continue
            if self:
                wrong, tried = selftest_one(quoted, output)
                for kind in tried:
                    counts[kind] = counts.get(kind, 0) + 1
                if not any(k in tried for k in ("a count changed by one", "a value moved beyond the tolerance")):
                    wrong.append(("no number to change", quoted[0]))
                for kind, line in wrong:
                    print(f"✗ {where}: {kind} ({line.strip()[:70]!r}) "
                          f"{'was not caught' if kind in pages.CAUGHT or kind.startswith('no') else 'was caught'}")
                    bad += 1
        if found:
            done.append(f"{name.split('_')[0]} ({len(found)})")
    total = sum(int(x.split("(")[1][:-1]) for x in done)
    tally = "; self-test: " + ", ".join(f"{k} ({v})" for k, v in counts.items()) if self else ""
    print(f"{'✓' if not bad else '✗'} Try it: {total} answers on {len(done)} lesson pages "
          f"[{', '.join(done)}] found in {len(cache)} runs, {time.time() - t0:.1f} s{tally}"
          + (f"; {bad} wrong" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
