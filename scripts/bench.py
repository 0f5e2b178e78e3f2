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


from bench_judge import *  # noqa: F401,F403  (the judging logic)
from bench_rows import *  # noqa: F401,F403  (the rows: the programs run)


# ---- the header -----------------------------------------------------------------------------------

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
    check("lib/core/kernel.h lists the Device's kernels", (len(kernels), kernels[:2]), (40, ["convert", "fill"]))
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
