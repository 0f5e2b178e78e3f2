#!/usr/bin/env python3
"""check-lessons.py — the lessons' rank counts, one table and everything that names them.

lessons/lessons.txt is the table ("NN_name  ranks"): the runners (run-lessons.sh, run-tests.sh)
read it, and this script checks the rest against it:

  - every lessons/NN_name/ folder is in the table, and every row has a folder;
  - each lesson binary says in its --help that it runs on the table's rank count
    ("Runs on 3 ranks: mpirun -np 3 build/bin/lesson_09_... (also works with -np 1, 2, 4)");
  - every "mpirun -np N build/bin/lesson_NN_name" written in README.md, docs/, lessons/README.md,
    the lesson pages and the lessons' source uses a rank count that lesson accepts;
  - lessons/README.md's index runs each lesson at the table's count.

  scripts/check-lessons.py [BUILD]     (BUILD: where bin/ is, default build; MPIEXEC honoured)
"""
import os
import re
import subprocess
import sys

from lesson_table import lessons

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RUN = re.compile(r"mpirun(?:\.\w+)? -np (\d+) (?:\S*/)?build/bin/lesson_(\w+)")


def table():
    """{name: ranks} from lessons/lessons.txt."""
    return dict(lessons())


def accepted(build, name):
    """(first, all accepted rank counts) from the binary's --help, or an error string."""
    mpiexec = os.environ.get("MPIEXEC", "mpirun")
    flags = os.environ.get("MPI_FLAGS", "").split()
    cmd = [mpiexec, *flags, "-np", "1", os.path.join(build, "bin", "lesson_" + name), "--help"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{' '.join(cmd)}: {e}"
    m = re.search(r"Runs on (\d+) ranks: mpirun -np \d+ \S+(?: \(also works with -np ([\d, ]+)\))?", out)
    if not m:
        return f"lesson_{name} --help does not say how many ranks it runs on"
    also = [int(x) for x in m.group(2).split(",")] if m.group(2) else []
    return int(m.group(1)), {int(m.group(1)), *also}


def texts():
    """(path, text) of every file that may show how to run a lesson."""
    paths = ["README.md", "lessons/README.md"]
    for d in ("docs", "lessons"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for fn in files:
                if fn.endswith((".md", ".cpp", ".h")):
                    paths.append(os.path.relpath(os.path.join(dirpath, fn), ROOT))
    for p in sorted(set(paths)):
        with open(os.path.join(ROOT, p), encoding="utf-8") as fh:
            yield p, fh.read()


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    rows, problems = table(), []
    folders = {d for d in os.listdir(os.path.join(ROOT, "lessons"))
               if os.path.isfile(os.path.join(ROOT, "lessons", d, "main.cpp"))}
    for d in sorted(folders - set(rows)):
        problems.append(f"lessons/{d}/ is not in lessons/lessons.txt")
    for d in sorted(set(rows) - folders):
        problems.append(f"lessons/lessons.txt names {d}, which has no lessons/{d}/main.cpp")
    ranks = {}
    for name, np in sorted(rows.items()):
        got = accepted(build, name)
        if isinstance(got, str):
            problems.append(got)
            continue
        first, ranks[name] = got
        if first != np:
            problems.append(f"lesson_{name} suggests {first} ranks, lessons/lessons.txt says {np}")
    mentions = 0
    for path, text in texts():
        for n, line in enumerate(text.splitlines(), 1):
            for m in RUN.finditer(line):
                np, name = int(m.group(1)), m.group(2)
                mentions += 1
                if name not in rows:
                    problems.append(f"{path}:{n}: names lesson_{name}, which lessons/lessons.txt does not have")
                elif name in ranks and np not in ranks[name]:
                    problems.append(f"{path}:{n}: runs lesson_{name} on {np} ranks; it runs on "
                                    f"{', '.join(map(str, sorted(ranks[name])))}")
    index = open(os.path.join(ROOT, "lessons/README.md"), encoding="utf-8").read()
    for name, np in sorted(rows.items()):
        # The launch flags of a lessons.txt launch column (e.g. -launcher fork -hosts ...) may
        # stand between mpirun and -np.
        if not re.search(r"mpirun(?: [^`]*?)? -np " + str(np) + r" build/bin/lesson_" + name + "`", index):
            problems.append(f"lessons/README.md: no `mpirun -np {np} build/bin/lesson_{name}` in the index")
    for p in problems:
        print(f"✗ {p}")
    if problems:
        return 1
    print(f"✓ lessons: {len(rows)} lessons in lessons/lessons.txt; their --help, the index and "
          f"{mentions} mpirun lines in the docs agree with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
