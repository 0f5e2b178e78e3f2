"""bench_judge.py — make bench's judging logic (scripts/bench.py): medians and spreads, goals and
their marks (✓ every run meets it, ✗ every run misses it, ~ they straddle it), the rows and the
Markdown tables. No programs run here; scripts/bench.py --selftest checks it on made-up runs.
"""
import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import platform
import re
import shlex
import math
import statistics
import subprocess
import sys
import tempfile
import time


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# The benchmark model (the one the issue measured PyTorch with).
MODEL = ["--layers", "4", "--hidden", "256", "--heads", "8", "--seq", "128", "--batch", "8", "--vocab", "256"]
QUIET_LOAD = 0.5  # a 1-minute load average above this at the start: the machine was not quiet



# ---- the judging logic (checked by --selftest) --------------------------------------------------

def spread(values):
    """(median, min, max) of the values a row measured, one per run."""
    return statistics.median(values), min(values), max(values)


class Goal:
    """A goal on a ratio: at least `lo`, at most `hi`, or both. judge() says ✓ only when every run
    meets it, ✗ only when every run misses it on the same side, and ~ when the runs straddle it."""

    def __init__(self, lo=None, hi=None, unit="×", extra=""):
        self.lo, self.hi, self.unit, self.extra = lo, hi, unit, extra

    def text(self):
        if self.lo is not None and self.hi is not None:
            core = f"{self.lo:g} … {self.hi:g}{self.unit}"
        else:
            core = ("≥ " if self.lo is not None else "≤ ") + fmt_ratio(self.hi if self.lo is None else self.lo,
                                                                   self.unit)
        return core + self.extra

    def judge(self, values):
        _, low, high = spread(values)
        below = self.lo is not None and high < self.lo  # all runs miss on the low side
        above = self.hi is not None and low > self.hi  # all runs miss on the high side
        if below or above:
            return "✗"
        meets_lo = self.lo is None or low >= self.lo
        meets_hi = self.hi is None or high <= self.hi
        return "✓" if meets_lo and meets_hi else "~"


def at_least(x, **kw):
    return Goal(lo=x, **kw)


def at_most(x, **kw):
    return Goal(hi=x, **kw)


def between(lo, hi, **kw):
    return Goal(lo=lo, hi=hi, **kw)


def combine(marks):
    """One judgement for a group of rows: ✗ if any row misses for sure, else ~ if any is unsure."""
    marks = [m for m in marks if m]
    if not marks:
        return ""
    return "✗" if "✗" in marks else "~" if "~" in marks else "✓"


def quiet_warning(load_1min):
    """The line the header starts with when the machine was busy at the start, else None."""
    if load_1min > QUIET_LOAD:
        return (f"WARNING: the machine was not quiet: 1-minute load average {load_1min:.2f} at the start "
                f"(> {QUIET_LOAD}); other work skews every ratio and widens the spreads. Rerun on a quiet "
                f"machine before quoting these numbers.")
    return None


def fmt_ratio(x, unit="×"):
    return f"{x:.0f} %" if unit == "%" else f"{x:.2f}{unit}"


def fmt_spread(values, unit="×"):
    _, low, high = spread(values)
    return f"{low:.0f}–{high:.0f} %" if unit == "%" else f"{low:.2f}–{high:.2f}"


class Row:
    def __init__(self, section, what, value, reference, values, goal=None, note="", wrong=0, unit="×"):
        self.section, self.what, self.values, self.value, self.reference = section, what, values, value, reference
        self.goal, self.note, self.wrong, self.unit = goal, note, wrong, unit

    def mark(self):
        """✓ ✗ ~ against the goal; ✗ whatever the timings when a run computed a wrong value."""
        if self.wrong:
            return "✗"
        return self.goal.judge(self.values) if self.goal and self.values else ""

    def cells(self):
        if not self.values:
            return ["", "", "0"]
        return [fmt_ratio(spread(self.values)[0], self.unit), fmt_spread(self.values, self.unit),
                str(len(self.values))]

    def as_json(self):
        return {"section": self.section, "what": self.what, "values": self.values, "value": self.value,
                "reference": self.reference, "goal": self.goal.text() if self.goal else "",
                "mark": self.mark(), "note": self.note, "wrong": self.wrong}


def markdown(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


class Table:
    def __init__(self):
        self.rows = []

    def add(self, *args, **kw):
        self.rows.append(Row(*args, **kw))

    def full(self):
        head = ["section", "what", "value", "reference", "ratio (median)", "spread (min–max)", "runs", "goal",
                "", "note"]
        return markdown(head, [[r.section, r.what, r.value, r.reference, *r.cells(),
                                r.goal.text() if r.goal else "", r.mark(), r.note] for r in self.rows])

    def summary(self):
        """README's table: one row per group of many rows (its worst median, with that row's spread,
        judged over every row of the group), then every row of the other sections."""
        groups = [("GEMM (1 thread)", "Device::gemm / direct cblas_sgemm, {n} layer GEMMs", min, "≥ 0.95×"),
                  ("threads (np 2)", "ranks × threads / cores; busy cores / thread budget", max, "≤ 1.00× (≤ 1.10×)"),
                  ("collectives (np 2)", "library / bare MPI, {n} calls: 3 ops × 256 KiB … 64 MiB", max, "≤ 1.05×")]
        out = []
        for section, what, pick, goal in groups:
            rows = [r for r in self.rows if r.section == section and r.goal and r.values]
            if not rows:
                continue
            worst = pick(rows, key=lambda r: spread(r.values)[0])
            best = (max if pick is min else min)(spread(r.values)[0] for r in rows)
            out.append([f"{what.format(n=len(rows))}: worst median (best {best:.2f}×)", *worst.cells(), goal,
                        combine(r.mark() for r in rows)])
        # The other sections' rows one by one, each named so that it reads without its section.
        named = {"overlap (t = 2, SP)": "lesson 11 (t = 2, SP, simulated link), {}",
                 "overlap (t = 2, no SP)": "lesson 11 (t = 2, no SP, simulated link), {}",
                 "α–β predictor (np 2)": "α–β prediction / measured, {} (`tp_train --link 10gbe --predict`)",
                 "training (t = 1)": "{} vs PyTorch eager", "strong scaling": "strong scaling: {}",
                 "memory stack (t = 1)": "{} (tp_train, t = 1)",
                 "model FLOP/s (t = 1)": "model FLOP/s: {}"}
        for r in self.rows:
            if r.section in named and r.goal and r.values:
                out.append([named[r.section].format(r.what), *r.cells(), r.goal.text(), r.mark()])
        return markdown(["what", "median", "spread (min–max)", "runs", "goal", ""], out)


# ---- the machine (what the header says, and what the rows judge by) ------------------------------

def cpuinfo(field):
    """The value of /proc/cpuinfo's first line for `field` ("model name", "flags"), or None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model():
    model = cpuinfo("model name")
    if model:
        return model + " (/proc/cpuinfo)"
    return (platform.processor() or platform.machine() or "unknown CPU") + " (platform)"


def load_1min():
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def on_onednn(info):
    """True when tp_bench said the project's f32 GEMMs run on oneDNN (INFO f32_gemm)."""
    return info.get("f32_gemm", "").startswith("oneDNN")


def ceiling_of(info):
    """What the ceiling was the best of: cblas_sgemm, and Device::gemm where that is oneDNN's."""
    return "of cblas_sgemm and Device::gemm" if on_onednn(info) else "cblas_sgemm"


def cpu_flags():
    """The CPU's feature flags (/proc/cpuinfo), or an empty set."""
    return set((cpuinfo("flags") or "").split())


AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")  # OpenBLAS's kernels that use AVX-512


def held_below_avx512(forced, flags, core=None, onednn=False):
    """A header line when OpenBLAS runs kernels without AVX-512 on a CPU that has it, else "": held
    there by OPENBLAS_CORETYPE (some machines' environments set Haswell), or, unforced, because the
    OpenBLAS is older than the CPU (Debian 12's 0.3.21 takes a 2-core Xeon of model 207, Emerald
    Rapids, for a Prescott: SSE3 kernels, a quarter of SkylakeX's one-thread ceiling there). Then
    the GEMM rows and the sgemm ceiling are those kernels', while oneDNN (the ring's packed blocks,
    bf16) still runs AVX-512, so the ring-against-none rows compare two instruction sets. Unforced,
    the project runs its f32 GEMMs on oneDNN there (onednn: TP_CPU_F32_GEMM=auto), and the line
    says that only the cblas column is OpenBLAS's slow kernels'."""
    if not {"avx512f", "avx512bw", "avx512vl"} <= flags:
        return ""
    tail = ("the fp32 GEMMs and the ceiling are those kernels', while oneDNN (the ring's packed blocks, "
            "bf16) still uses AVX-512")
    if forced:
        if forced.lower() in AVX512_CORES:
            return ""
        return (f"- note: OPENBLAS_CORETYPE={forced} holds OpenBLAS to kernels without AVX-512 on a CPU that "
                f"has it: {tail}; unset it for OpenBLAS's own pick")
    if not core or core.lower() in AVX512_CORES or core.lower().startswith("unknown"):
        return ""
    if onednn:
        return (f"- note: OpenBLAS does not know this CPU and runs its {core} kernels on it, without AVX-512, "
                "so the project's f32 GEMMs run on oneDNN's AVX-512 matmul (TP_CPU_F32_GEMM=auto); the GEMM "
                "suite's cblas column is OpenBLAS's own kernels")
    return (f"- note: OpenBLAS does not know this CPU and runs its {core} kernels on it, without AVX-512: "
            f"{tail}; OPENBLAS_CORETYPE=SkylakeX gives it its AVX-512 kernels")
