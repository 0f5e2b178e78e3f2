# packedgemm.sh — the ring's blocks on a weight packed once (core/device.h: Device::pack_gemm_b;
# the CPU: oneDNN's f32 matmul, cpu_backend/gemm_choice.h, TP_CPU_PACKED_GEMM=auto|off), sourced by
# scripts/run-tests.sh, section 8b.
#
# Bad input: an unknown TP_CPU_PACKED_GEMM is one line, exit 2. With oneDNN built in: the 10-step
# loss curve of --sp --overlap ring at t = 2 with the packed weight (auto) equals the one with
# cblas_sgemm on every block (off) within 1e-6 relative (oneDNN and OpenBLAS may sum a dot product
# in different fp32 orders; at this model's sizes they happened to agree bit for bit).

expect "TP_CPU_PACKED_GEMM with an unknown value" 2 "TP_CPU_PACKED_GEMM=yes is not a choice; use auto" \
  2 env TP_CPU_PACKED_GEMM=yes "${tt[@]}"
if [ "$(cat "$BUILD/onednn" 2>/dev/null)" = yes ]; then
  rm -f "$tmp"/packedgemm_*.json  # --log-json appends
  for packed in auto off; do
    run_mpi 2 env TP_CPU_PACKED_GEMM=$packed "${train[@]}" --hidden 128 --heads 8 --ffn 512 --seq 64 \
      --steps 10 --sp --overlap ring --log-json "$tmp/packedgemm_$packed.json" >"$logs/packedgemm_$packed.log" 2>&1 ||
      fail "tp_train --overlap ring with TP_CPU_PACKED_GEMM=$packed exited non-zero (see $logs/packedgemm_$packed.log)"
  done
  TOL=1e-6 same_curve "10-step --sp --overlap ring loss curve at t = 2, packed weight vs cblas_sgemm per block" \
    "$tmp/packedgemm_off.json" "$tmp/packedgemm_auto.json"
fi
