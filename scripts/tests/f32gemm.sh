# f32gemm.sh — the CPU backend's plain f32 GEMM (cpu_backend/gemm_choice.h: f32_gemm; OpenBLAS's
# cblas_sgemm, or oneDNN's f32 matmul where OpenBLAS runs kernels without AVX-512 on a CPU that has
# it; TP_CPU_F32_GEMM=auto|openblas|onednn), sourced by scripts/run-tests.sh, section 8b.
#
# Bad input: an unknown TP_CPU_F32_GEMM is one line, exit 2, and so is onednn in a build without
# oneDNN. With oneDNN built in: tp_train's startup log names the oneDNN route when it is forced, and
# its 10-step loss curve at t = 2 equals OpenBLAS's within 1e-5 relative (the two libraries may sum
# a dot product in different fp32 orders; the last digits of a loss may then differ).

expect "TP_CPU_F32_GEMM with an unknown name" 2 "TP_CPU_F32_GEMM=cublas is not a CPU f32 GEMM; use openblas, onednn or auto" \
  2 env TP_CPU_F32_GEMM=cublas "${tt[@]}"
if [ "$(cat "$BUILD/onednn" 2>/dev/null)" = yes ]; then
  rm -f "$tmp"/f32gemm_*.json  # --log-json appends
  for path in onednn openblas; do
    run_mpi 2 env TP_CPU_F32_GEMM=$path "${train[@]}" --steps 10 --log-json "$tmp/f32gemm_$path.json" \
      >"$logs/f32gemm_$path.log" 2>&1 || fail "tp_train with TP_CPU_F32_GEMM=$path exited non-zero (see $logs/f32gemm_$path.log)"
  done
  if grep -q "f32 GEMMs: oneDNN (.*TP_CPU_F32_GEMM=onednn" "$logs/f32gemm_onednn.log" &&
    ! grep -q "f32 GEMMs: oneDNN" "$logs/f32gemm_openblas.log"; then
    pass 1; echo "✓ tp_train names the f32 GEMM: $(grep -o 'f32 GEMMs: [^;]*' "$logs/f32gemm_onednn.log" | head -1)"
  else fail "tp_train does not name its f32 GEMM (see $logs/f32gemm_onednn.log)"; fi
  TOL=1e-5 same_curve "10-step loss curve at t = 2, oneDNN f32 GEMM vs OpenBLAS" \
    "$tmp/f32gemm_openblas.json" "$tmp/f32gemm_onednn.json"
else
  expect "TP_CPU_F32_GEMM=onednn without oneDNN" 2 "this build has no oneDNN; install libdnnl-dev" \
    2 env TP_CPU_F32_GEMM=onednn "${tt[@]}"
fi
