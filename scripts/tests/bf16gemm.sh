# bf16gemm.sh — the CPU backend's bf16 GEMM (cpu_backend/gemm_choice.h: oneDNN or sgemm on f32
# stand-ins, TP_CPU_BF16_GEMM=onednn|sgemm|auto), sourced by scripts/run-tests.sh, section 8b.
#
# Bad input: an unknown TP_CPU_BF16_GEMM is one line, exit 2, and so is onednn in a build without
# oneDNN. With oneDNN built in: tp_train --precision bf16's startup log names the path, and the
# oneDNN run's 20-step loss curve at t = 2 equals the stand-in's within 1e-3 (the two GEMMs sum in
# different fp32 orders, so a few bf16 roundings of the outputs differ: see the bound below).

expect "TP_CPU_BF16_GEMM with an unknown name" 2 "TP_CPU_BF16_GEMM=cublas is not a CPU bf16 GEMM; use onednn, sgemm or auto" \
  2 env TP_CPU_BF16_GEMM=cublas "${tt[@]}" --precision bf16
if [ "$(cat "$BUILD/onednn" 2>/dev/null)" = yes ]; then
  rm -f "$tmp"/bf16gemm_*.json  # --log-json appends
  for path in onednn sgemm; do
    run_mpi 2 env TP_CPU_BF16_GEMM=$path "${train[@]}" --steps 20 --precision bf16 --log-json "$tmp/bf16gemm_$path.json" \
      >"$logs/bf16gemm_$path.log" 2>&1 || fail "tp_train --precision bf16 with TP_CPU_BF16_GEMM=$path exited non-zero (see $logs/bf16gemm_$path.log)"
  done
  if grep -q "^bf16 GEMM: oneDNN (" "$logs/bf16gemm_onednn.log" && grep -q "^bf16 GEMM: sgemm on f32 stand-ins" "$logs/bf16gemm_sgemm.log"; then
    pass 1; echo "✓ tp_train names the bf16 GEMM: $(grep -o '^bf16 GEMM: .*' "$logs/bf16gemm_onednn.log" | head -1)"
  else fail "tp_train --precision bf16 does not name its bf16 GEMM (see $logs/bf16gemm_onednn.log)"; fi
  # Bound: t = 2 against t = 1 in bf16 differ by 1.5e-4 in the loss after one step (test_precision_mpi.cpp,
  # the same kind of flipped roundings); 20 AdamW steps on this small model grow it a few times.
  TOL=1e-3 same_curve "20-step bf16 loss curve at t = 2, oneDNN GEMM vs sgemm stand-in" \
    "$tmp/bf16gemm_sgemm.json" "$tmp/bf16gemm_onednn.json"
else
  expect "TP_CPU_BF16_GEMM=onednn without oneDNN" 2 "this build has no oneDNN; install libdnnl-dev" \
    2 env TP_CPU_BF16_GEMM=onednn "${tt[@]}" --precision bf16
fi
