"""lesson_table.py — lessons/lessons.txt, read in one place for the Python scripts beside it.

The table has one lesson a line, "NN_name  ranks  [launch]" (the launch column: mpirun flags such
as two simulated nodes; scripts/common.sh's lesson_launch_flags reads it), and "#" comments.
"""
import os

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def lessons():
    """[(name, ranks)] from lessons/lessons.txt, in order; ranks an int."""
    rows = []
    with open(os.path.join(ROOT, "lessons", "lessons.txt"), encoding="utf-8") as fh:
        for line in fh:
            f = line.split()
            if len(f) in (2, 3) and not line.startswith("#"):  # name, ranks [, launch]
                rows.append((f[0], int(f[1])))
    return rows
