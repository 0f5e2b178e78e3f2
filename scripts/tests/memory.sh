# memory.sh — issue 22's memory flags on tp_train: --recompute, --micro-batches, --zero (sourced by
# scripts/run-tests.sh, section 8b).
#
# Bad input: one line each, exit 2, within 10 s. Then the loss curves at np 4 --dp 2 (tp 2 × dp 2):
# --micro-batches 2, --zero 1 and --recompute full against the plain run, within 1e-4 relative at
# every step (same_curve; micro-batches add the gradient in another order, ZeRO-1 sums the norm in
# another order, recomputation is bitwise), and a --zero 1 checkpoint resumed without ZeRO at t = 1.

# 1. Bad input.
expect "--micro-batches not dividing the batch per replica" 2 \
  "--micro-batches=3 does not divide the batch per replica 2 (batch 4 / dp 2); choose one of {1,2}" 4 \
  "${tt[@]}" --dp 2 --batch 4 --micro-batches 3
expect "--zero 1 with dp 1" 2 "--zero 1 with dp=1: ZeRO-1 shards the optimizer state over the data-parallel group" 2 \
  "${tt[@]}" --zero 1
expect "--zero 2" 2 "--zero=2 is not a stage this build has; use 0 or 1" 2 "${tt[@]}" --dp 2 --zero 2
expect "--dump-grads with --zero 1" 2 "--dump-grads with --zero 1: each replica holds only its 1/dp" 2 \
  "${tt[@]}" --dp 2 --zero 1 --dump-grads "$tmp/zero_grads.safetensors"
expect "--recompute with an unknown mode" 2 "--recompute=partial" 2 "${tt[@]}" --recompute partial

# 2. Loss curves at tp 2 × dp 2 against the plain run of the same grid.
rm -f "$tmp"/mem_*.json  # --log-json appends
run_mpi 4 "${train[@]}" --steps 20 --dp 2 --log-json "$tmp/mem_plain.json" >"$logs/mem_plain.log" 2>&1 ||
  fail "tp_train --dp 2 at -np 4 exited non-zero (see $logs/mem_plain.log)"
for variant in "micro-batches 2" "zero 1" "recompute full" "recompute selective"; do
  name=${variant// /_}
  # shellcheck disable=SC2086  # the variant is two words on purpose
  run_mpi 4 "${train[@]}" --steps 20 --dp 2 --${variant% *} ${variant#* } --save "$tmp/mem_$name.safetensors" \
    --log-json "$tmp/mem_$name.json" >"$logs/mem_$name.log" 2>&1 ||
    fail "tp_train --dp 2 --$variant at -np 4 exited non-zero (see $logs/mem_$name.log)"
  same_curve "20-step loss curve, tp 2 × dp 2 --$variant vs plain" "$tmp/mem_plain.json" "$tmp/mem_$name.json"
done
# The measured activations per block fall by m (tp_train checks ledger = formula on its first step).
if grep -q "activations kept per block on each rank" "$logs/mem_micro-batches_2.log" 2>/dev/null; then
  pass 1; echo "✓ --micro-batches 2: $(grep -o 'activations kept per block.*' "$logs/mem_micro-batches_2.log" | head -1)"
else fail "--micro-batches 2: no ledger line (see $logs/mem_micro-batches_2.log)"; fi

# 3. A ZeRO-1 checkpoint holds global tensors: it resumes at t = 1 without ZeRO, and at tp 2 × dp 2
#    with it, on the same curve (the first 20 steps of a 24-step plain run).
run_mpi 4 "${train[@]}" --steps 24 --dp 2 --log-json "$tmp/mem_plain24.json" >"$logs/mem_plain24.log" 2>&1 ||
  fail "tp_train --steps 24 --dp 2 at -np 4 exited non-zero (see $logs/mem_plain24.log)"
run_mpi 1 "${train[@]}" --steps 4 --load "$tmp/mem_zero_1.safetensors" --log-json "$tmp/mem_resume1.json" \
  >"$logs/mem_resume1.log" 2>&1 || fail "resuming a --zero 1 checkpoint at t = 1 exited non-zero (see $logs/mem_resume1.log)"
same_curve "--zero 1 checkpoint resumed at t = 1 without ZeRO" "$tmp/mem_plain24.json" "$tmp/mem_resume1.json" 20
run_mpi 4 "${train[@]}" --steps 4 --dp 2 --zero 1 --load "$tmp/mem_recompute_full.safetensors" \
  --log-json "$tmp/mem_resume4.json" >"$logs/mem_resume4.log" 2>&1 ||
  fail "resuming a plain checkpoint with --zero 1 exited non-zero (see $logs/mem_resume4.log)"
same_curve "plain checkpoint resumed at tp 2 × dp 2 with --zero 1" "$tmp/mem_plain24.json" "$tmp/mem_resume4.json" 20
