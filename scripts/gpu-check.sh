#!/usr/bin/env bash
# gpu-check.sh — `make gpu-check`: everything that needs a GPU, in one run (≤ 8 minutes on one H200).
#
#   1. build (make -j all; the GPU backend must be in it), with the build dependencies from
#      .offline-deps/ where they cannot be installed (scripts/offline-deps.sh)
#   2. the GPU tests (build/bin/test_gpu) at np 1 (NCCL), 2 and 3 (--comm mpi: ranks share the GPU)
#   3. every lesson with --backend gpu: at np 1 over NCCL (when the lesson runs at t = 1) and at its
#      lessons/lessons.txt rank count over --comm mpi, each against the CPU run at the same rank
#      count: both must print PASSED with the same counts (quantities, comparisons, facts)
#   4. tp_train 20-step loss curves: GPU at np 1 (NCCL) and np 2 (--comm mpi, with --sp and
#      dropout) against the CPU, relative difference ≤ 1e-4 at every step; and under
#      --precision bf16 (np 2, --sp) against the CPU's bf16 at np 1, ≤ 1e-2
#   5. timings (tools/tp_bench --backend gpu), reported as ratios:
#        GEMM at the layer shapes of h = 4096 (8192 tokens) / the best GEMM at large square sizes,
#          in fp32, tf32 and bf16 (--precision bf16: bf16 operand tensors, as the model's GEMMs
#          read them)                                                           goal ≥ 0.75
#        one transformer block forward + backward (h 4096, s 2048, b 1, 32 heads) / PyTorch eager
#          on the same GPU at the same precision (scripts/bench_block_torch.py; skipped without
#          torch): fp32, tf32, and bf16 — ours under --precision bf16 (bf16 weight copies,
#          activations and their gradients, fp32 statistics and weight gradients) against the
#          forward under torch.autocast(dtype=torch.bfloat16)                    goal ≤ 1.1
#        LayerNorm, GeLU, add (forward and backward) GB/s / device-to-device copy GB/s
#                                                                               goal ≥ 0.6
#   6. a short table, last.
#
# GPU_CHECK_SIZES overrides the timing sizes for a smaller GPU, passed to tp_bench and
# bench_block_torch.py (default: h 4096, 8192 tokens, s 2048, b 1, 32 heads), e.g.
#   GPU_CHECK_SIZES="--hidden 1024 --tokens 2048 --seq 512 --heads 8" make gpu-check
# GPU_CHECK_BUDGET (seconds, default 480): later steps are skipped, and say so, once it is spent.
#
# GPU_CHECK_EMU=1 (what `make gpu-emu` sets): the same steps on the CUDA emulator (tests/cuda_emu:
# the GPU backend's kernels run on the CPU) instead of a GPU: no GPU probe, no build (make built
# $BUILD/emu/bin), one shared "GPU" as on a one-GPU machine (TP_EMU_SHARED_GPU=1), tiny timing
# sizes. Its correctness results are real; its timings only show that the steps and their parsing
# work (PyTorch, where a python3 has it, runs the block on the CPU: bench_block_torch.py --device
# cpu, as meaningless).
#
# Logs: $OUT/gpu-check/ when OUT is set, else $BUILD/gpu-check/. Exit 1 when a correctness check
# fails (tests, lessons, loss curves, a build without the GPU backend); performance goals are
# reported (met / MISSED) but do not fail the run. Without a GPU: one line, exit 0.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/common.sh
budget=${GPU_CHECK_BUDGET:-480}  # seconds; steps are skipped (and say so) once it runs out
emu=${GPU_CHECK_EMU:-0}
gbin=$BUILD/bin  # the programs run with --backend gpu
if [ "$emu" = 1 ]; then
  gbin=$BUILD/emu/bin
  export TP_EMU_SHARED_GPU=1
  GPU_CHECK_SIZES=${GPU_CHECK_SIZES:---hidden 64 --tokens 128 --seq 32 --batch 1 --heads 4}
  budget=${GPU_CHECK_BUDGET:-900}
fi

# ---- 0. Is there a GPU? ---------------------------------------------------------------------------
if [ "$emu" = 1 ]; then
  :  # the emulator is the GPU
elif command -v nvidia-smi >/dev/null 2>&1; then
  if ! smi=$(nvidia-smi -L 2>&1) || ! echo "$smi" | grep -q '^GPU'; then
    echo "gpu-check: no GPU: nothing to check (nvidia-smi: $(echo "$smi" | head -1))"
    exit 0
  fi
elif ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "gpu-check: no GPU: nothing to check (no nvidia-smi, no /dev/nvidia*)"
  exit 0
fi

logs=${OUT:+$OUT/gpu-check}
logs=${logs:-$BUILD/gpu-check$([ "$emu" = 1 ] && echo -emu)}
mkdir -p "$logs"
rows=()      # the final table: "name|result|goal|verdict"
failed=0
row() { rows+=("$1|$2|$3|$4"); }
bad() { failed=$((failed + 1)); echo "✗ $*"; }
left() { echo $((budget - SECONDS)); }
run_mpi() { local np=$1 t=$2; shift 2; timeout "$t" "$MPIEXEC" $MPI_FLAGS -np "$np" "$@" </dev/null; }
num() { sed -n "s/^RESULT [^ ]* $1 \([^ ]*\) .*/\1/p" "$2" | tail -1; }        # value of a RESULT line
ratio() { sed -n "s/^RESULT [^ ]* $1 [^ ]* [^ ]* [^ ]* \([^ ]*\)$/\1/p" "$2" | tail -1; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# ---- 0b. Build dependencies on a machine that cannot install packages ----------------------------
# The lent GPU machine reaches no package registry: MPICH, GoogleTest and nlohmann-json come from
# .offline-deps/ when they are missing there (scripts/offline-deps.sh download, run beforehand on a
# machine with apt; carried along), and NCCL from Python's nvidia-nccl package when the CUDA
# folder has no nccl.h.
if [ "$emu" != 1 ] && ! . scripts/offline-deps.sh use; then
  echo "gpu-check: build dependencies missing: on a machine with apt run scripts/offline-deps.sh download, and bring .offline-deps/ along"
  exit 1
fi

# ---- 1. Build ------------------------------------------------------------------------------------
if [ "$emu" = 1 ]; then
  echo "gpu-check: on the CUDA emulator ($gbin): correctness only, timings mean nothing"
  row "build" "emulator ($gbin)" "-" ok
elif echo "gpu-check: building (log: $logs/build.log)" && ! make -j"$(nproc)" all >"$logs/build.log" 2>&1; then
  tail -20 "$logs/build.log"
  echo "gpu-check: the build failed (see $logs/build.log)"
  exit 1
fi
backend=$(cat "$BUILD/gpu-backend" 2>/dev/null || echo "no: unknown")
[ "$emu" = 1 ] && backend=yes
if [ "$backend" != yes ]; then
  echo "gpu-check: there is a GPU, but this build has no GPU backend (${backend#no: }): install the CUDA toolkit (nvcc, cuBLAS) and NCCL, or unset NO_CUDA"
  exit 1
fi
if [ "$emu" != 1 ]; then
  warnings=$(grep -c -i 'warning' "$logs/build.log")
  row "build (GPU backend)" "$warnings warnings" "0" "$([ "$warnings" = 0 ] && echo ok || echo MISSED)"
fi

# Is the GPU usable from this build? (no CUDA device → one line, exit 0)
"$gbin/tp_bench" --backend gpu --suite none >"$logs/probe.log" 2>&1
rc=$?
if [ $rc != 0 ]; then
  if grep -q 'no CUDA device' "$logs/probe.log"; then
    echo "gpu-check: no GPU: nothing to check ($(grep -o 'no CUDA device.*' "$logs/probe.log" | head -1))"
    exit 0
  fi
  cat "$logs/probe.log"
  echo "gpu-check: creating the CUDA device failed (exit $rc; see $logs/probe.log)"
  exit 1
fi
device=$(sed -n 's/^tp_bench on 1 ranks, \([^,]*\),.*/\1/p' "$logs/probe.log" | head -1)
echo "gpu-check: $device ($(left) s of the ${budget} s budget left)"

# ---- 2. GPU tests --------------------------------------------------------------------------------
tests_result="" tests_ok=ok
for np in 1 2 3; do
  log=$logs/test_gpu.np$np.log
  run_mpi "$np" 180 "$gbin/test_gpu" >"$log" 2>&1
  rc=$?
  line=$(grep '^tp-tests:' "$log" | tail -1)
  if [ -z "$line" ]; then
    bad "test_gpu -np $np exited $rc without a result (see $log)"; tests_result+="np$np: crash "; tests_ok=FAILED
    continue
  fi
  p=$(echo "$line" | sed 's/.*passed=\([0-9]*\).*/\1/'); f=$(echo "$line" | sed 's/.*failed=\([0-9]*\).*/\1/')
  s=$(echo "$line" | sed 's/.*skipped=\([0-9]*\).*/\1/')
  tests_result+="np$np: $p/$((p + f + s)) "
  if [ "$f" != 0 ]; then
    bad "test_gpu -np $np: $f failed (see $log)"; tests_ok=FAILED
    grep '^\[  FAILED  \] [A-Za-z][^ ]*$' "$log" | sort -u | sed 's/^/    /'
  else
    echo "✓ test_gpu -np $np: $p passed, $s skipped"
  fi
done
row "GPU tests (passed/total)" "$tests_result" "all pass" "$tests_ok"

# ---- 3. Lessons on the GPU against the CPU -------------------------------------------------------
# "PASSED: 14 quantities checked against one device (38 per-rank comparisons); 9 other facts
# checked" -> "14 quantities (38 per-rank comparisons), 9 other facts": the counts to compare.
checks() {
  grep '^PASSED: ' "$1" | head -1 |
    sed -e 's/^PASSED: //' -e 's/ checked against one device//' -e 's/; / + /' -e 's/ checked$//'
}
lessons_ok=0 lessons_total=0
while read -r name np; do
  [ "$(left)" -gt 120 ] || { echo "· lessons: out of time, $name and later not run"; lessons_total=$((lessons_total + 1)); break; }
  lessons_total=$((lessons_total + 1))
  bin=$BUILD/bin/lesson_$name gpu_bin=$gbin/lesson_$name
  launch=$(lesson_launch_flags "$name" "$np") || { echo "· $launch"; lessons_total=$((lessons_total - 1)); continue; }
  cpu=$logs/lesson_$name.cpu.np$np.log gmpi=$logs/lesson_$name.gpu-mpi.np$np.log g1=$logs/lesson_$name.gpu-nccl.np1.log
  MPI_FLAGS="$MPI_FLAGS $launch" run_mpi "$np" 120 "$bin" >"$cpu" 2>&1
  MPI_FLAGS="$MPI_FLAGS $launch" run_mpi "$np" 120 "$gpu_bin" --backend gpu --comm mpi >"$gmpi" 2>&1
  run_mpi 1 120 "$gpu_bin" --backend gpu >"$g1" 2>&1
  rc1=$?
  c=$(checks "$cpu") gm=$(checks "$gmpi") g=$(checks "$g1")
  ok=1
  if [ -z "$c" ] || [ "$gm" != "$c" ]; then
    ok=0; bad "lesson $name -np $np: CPU ${c:-no PASSED}, GPU --comm mpi ${gm:-no PASSED} (see $gmpi)"
  fi
  np1="n/a (needs -np $np)"
  if [ -n "$g" ]; then
    np1="PASSED, $g"
    run_mpi 1 120 "$bin" >"$logs/lesson_$name.cpu.np1.log" 2>&1
    c1=$(checks "$logs/lesson_$name.cpu.np1.log")
    [ "$g" = "$c1" ] || { ok=0; bad "lesson $name -np 1: CPU ${c1:-no PASSED}, GPU over NCCL $g (see $g1)"; }
  elif ! { [ "$rc1" = 2 ] && grep -q "runs on" "$g1"; }; then
    ok=0; bad "lesson $name -np 1 --backend gpu (NCCL) exited $rc1 without PASSED (see $g1)"
  fi
  [ $ok = 1 ] && { lessons_ok=$((lessons_ok + 1)); echo "✓ lesson $name: -np $np --comm mpi PASSED, $gm, as on the CPU; -np 1 NCCL: $np1"; }
done < <(lesson_list)
row "lessons, GPU = CPU (PASSED)" "$lessons_ok/$lessons_total" "all" "$([ "$lessons_ok" = "$lessons_total" ] && echo ok || echo FAILED)"

# ---- 4. tp_train loss curves, GPU against CPU ----------------------------------------------------
train=(--layers 2 --hidden 48 --heads 12 --ffn 96 --seq 16 --batch 4 --steps 20 --log-every 1000)
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
worst() {  # largest relative difference of two loss curves, "none" when either is empty
  paste <(losses "$1") <(losses "$2") |
    awk 'NF == 2 { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d; n++ } END { if (n == 0) print "none"; else printf "%.2e", w }'
}
curve() {  # curve NAME CPU_JSON GPU_JSON [BOUND, default 1e-4]
  local w b=${4:-1e-4}
  w=$(worst "$2" "$3")
  if [ "$w" != none ] && le "$w" "$b"; then echo "✓ $1: largest relative difference $w"; row "$1" "$w" "<= $b" ok
  else bad "$1: $w (> $b or missing)"; row "$1" "$w" "<= $b" FAILED; fi
}
run_mpi 1 120 "$BUILD/bin/tp_train" "${train[@]}" --log-json "$logs/train_cpu.json" >"$logs/train_cpu.log" 2>&1
run_mpi 1 120 "$gbin/tp_train" "${train[@]}" --backend gpu --log-json "$logs/train_gpu_nccl.json" >"$logs/train_gpu_nccl.log" 2>&1
curve "tp_train 20 steps, GPU (NCCL, t=1) vs CPU" "$logs/train_cpu.json" "$logs/train_gpu_nccl.json"
run_mpi 1 120 "$BUILD/bin/tp_train" "${train[@]}" --dropout 0.1 --log-json "$logs/train_cpu_drop.json" >"$logs/train_cpu_drop.log" 2>&1
run_mpi 2 120 "$gbin/tp_train" "${train[@]}" --dropout 0.1 --sp --backend gpu --comm mpi --log-json "$logs/train_gpu_sp.json" >"$logs/train_gpu_sp.log" 2>&1
curve "tp_train 20 steps, GPU (--comm mpi, t=2, --sp, dropout) vs CPU t=1" "$logs/train_cpu_drop.json" "$logs/train_gpu_sp.json"
# --precision bf16 (the GPU's native bf16 kernels): the same rounding points on both backends, so
# the curves differ only where an fp32 kernel's last bit flips a bf16 rounding (and t = 2 rounds at
# the TP sums): bound 1e-2, scripts/tests/precision.sh's bf16-vs-fp32 bound, a larger difference.
run_mpi 1 120 "$BUILD/bin/tp_train" "${train[@]}" --precision bf16 --log-json "$logs/train_cpu_bf16.json" >"$logs/train_cpu_bf16.log" 2>&1
run_mpi 2 120 "$gbin/tp_train" "${train[@]}" --precision bf16 --sp --backend gpu --comm mpi --log-json "$logs/train_gpu_bf16.json" >"$logs/train_gpu_bf16.log" 2>&1
curve "tp_train 20 steps bf16, GPU (--comm mpi, t=2, --sp) vs CPU bf16 t=1" "$logs/train_cpu_bf16.json" "$logs/train_gpu_bf16.json" 1e-2

# ---- 5. Timings ----------------------------------------------------------------------------------
# shellcheck disable=SC2206
sizes=(${GPU_CHECK_SIZES:-})
bench=("$gbin/tp_bench" --backend gpu --comm mpi "${sizes[@]}")
timing() {  # timing LOG SECONDS ARGS...: one tp_bench run, unless the budget is spent
  local log=$1 t=$2; shift 2
  if [ "$(left)" -lt "$t" ]; then echo "· $(basename "$log" .log): skipped, out of time"; return 1; fi
  timeout "$t" "${bench[@]}" "$@" >"$log" 2>&1 || { echo "✗ tp_bench $* failed (see $log)"; return 1; }
  grep -v '^RESULT' "$log"
}
for prec in fp32 tf32 bf16; do
  case $prec in fp32) flags=() ;; tf32) flags=(--tf32) ;; bf16) flags=(--precision bf16) ;; esac
  log=$logs/bench_gemm_$prec.log
  if timing "$log" 90 --suite gemm "${flags[@]}"; then
    low=$(sed -n "s/^RESULT gemm $prec\.[a-z0-9]*\.[a-z]* [^ ]* TFLOP\/s [^ ]* \([^ ]*\)$/\1/p" "$log" | sort -g | head -1)
    ceil=$(num "$prec.ceiling" "$log")
    wrong=$(grep -c "^RESULT gemm $prec\..*\.wrong" "$log")
    [ "$wrong" = 0 ] || bad "GEMM $prec: $wrong layer shapes with wrong sampled elements (see $log)"
    row "GEMM $prec: worst layer / ceiling ($ceil TFLOP/s)" "$low" ">= 0.75" "$(ge "${low:-0}" 0.75 && echo met || echo MISSED)"
  fi
done
log=$logs/bench_memory.log
if timing "$log" 60 --suite memory; then
  copy=$(num copy "$log")
  for k in layernorm.fwd layernorm.bwd gelu.fwd gelu.bwd add; do
    r=$(ratio "$k" "$log")
    row "$k GB/s / copy ($copy GB/s)" "$r" ">= 0.6" "$(ge "${r:-0}" 0.6 && echo met || echo MISSED)"
  done
fi
# PyTorch on the GPU; on the emulator, PyTorch on the CPU (a dry run of the script and the parsing)
# from the first python3 that has it.
have_torch=0 py=${PYTHON:-python3} torch_dev=()
if [ "$emu" != 1 ]; then
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 && have_torch=1
else
  for p in "$py" /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then have_torch=1 py=$p torch_dev=(--device cpu); break; fi
  done
fi
for prec in fp32 tf32 bf16; do
  # ours / PyTorch's flags: bf16 is --precision bf16 against torch.autocast(dtype=torch.bfloat16)
  case $prec in fp32) flags=() tflags=() ;; tf32) flags=(--tf32) tflags=(--tf32) ;;
                bf16) flags=(--precision bf16) tflags=(--bf16) ;; esac
  log=$logs/bench_block_$prec.log
  timing "$log" 90 --suite block "${flags[@]}" || continue
  ours=$(num "$prec.fwd_bwd_ms" "$log")
  if [ $have_torch = 1 ] && [ "$(left)" -gt 60 ]; then
    tlog=$logs/bench_block_torch_$prec.log
    timeout 120 "$py" scripts/bench_block_torch.py "${sizes[@]}" "${tflags[@]}" "${torch_dev[@]}" >"$tlog" 2>&1
    grep -v '^RESULT' "$tlog"
    theirs=$(num "$prec.fwd_bwd_ms" "$tlog")
    if [ -n "$theirs" ] && [ -n "$ours" ]; then
      r=$(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.3f", a / b }')
      row "block fwd+bwd $prec: ours / PyTorch ($ours / $theirs ms)" "$r" "<= 1.1" "$(le "$r" 1.1 && echo met || echo MISSED)"
    else
      row "block fwd+bwd $prec: ours $ours ms" "PyTorch run failed" "<= 1.1" "n/a"
    fi
  else
    row "block fwd+bwd $prec: ours $ours ms" "no PyTorch" "<= 1.1" "n/a"
  fi
done

# ---- 6. The table ----------------------------------------------------------------------------------
{
  echo
  echo "gpu-check on $device, $SECONDS s (logs: $logs)"
  [ "$emu" = 1 ] && echo "EMULATOR: the GPU code ran on the CPU; the correctness rows hold, the timing rows mean nothing"
  printf '%-68s %-34s %-9s %s\n' "check" "result" "goal" ""
  for r in "${rows[@]}"; do
    IFS='|' read -r a b c d <<<"$r"
    printf '%-68s %-34s %-9s %s\n' "$a" "$b" "$c" "$d"
  done
  if [ $failed = 0 ]; then echo "gpu-check: all correctness checks passed"
  else echo "gpu-check: $failed correctness checks FAILED"; fi
} | tee "$logs/summary.txt"
[ $failed = 0 ]
