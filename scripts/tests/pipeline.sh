# pipeline.sh — issue 23's pipeline parallelism on tp_train: --pp, --schedule, --pp-layers (sourced by
# scripts/run-tests.sh, section 8b).
#
# Bad input: one line each, exit 2, within 10 s. Then loss curves against t = 1 within 1e-4
# relative at every step (same_curve; the stages and micro-batches add the gradients in another
# order): tp 2 × pp 2 (1F1B, m 2), pp 2 × dp 2 (AFAB), pp 4 (1F1B, m 4, --layers 4, --pp-layers
# 1,1,1,1 given), pp 2 untied; in bf16 pp 2 against t = 1 and tp 2 × pp 2 against tp 2 (both
# bf16). Checkpoints stay global: a run saved at (tp 2, pp 2) resumes at
# (tp 4, pp 1) and at t = 1 on the curve of an uninterrupted t = 1 run; pp 2 × dp 2 with --zero 1
# gives t = 1's curve too and its checkpoint resumes at tp 2.

# 1. Bad input.
expect "--pp not dividing np" 2 "pp=2 with dp=1 does not divide the 3 ranks" 3 "${tt[@]}" --pp 2
expect "--pp: more stages than blocks" 2 "--pp=4 stages for 2 blocks: every stage needs at least one block" 4 \
  "${tt[@]}" --layers 2 --pp 4
expect "--schedule 1f1b with m < N" 2 "--schedule 1f1b with --micro-batches=1 < --pp=2" 2 \
  "${tt[@]}" --pp 2 --schedule 1f1b
expect "--schedule unknown" 2 "--schedule=gpipe: expected one of afab, 1f1b" 2 \
  "${tt[@]}" --pp 2 --schedule gpipe
expect "--pp-layers not summing to L" 2 "--pp-layers lists 2 stages of 3 blocks in all, but --pp=2 and --layers=2" 2 \
  "${tt[@]}" --pp 2 --pp-layers 2,1
expect "--pp-layers not a list of counts" 2 "--pp-layers=1,a: 'a' is not a block count" 2 \
  "${tt[@]}" --pp 2 --pp-layers 1,a
expect "--zero 1 with --pp and no DP group" 2 "--zero 1 with dp=1: ZeRO-1 shards the optimizer state" 2 \
  "${tt[@]}" --pp 2 --zero 1

# 2. Loss curves against t = 1 (24 steps: the first 20 for the curves, the rest for the resume).
rm -f "$tmp"/pp_*.json "$tmp"/pp_*.safetensors  # --log-json appends
run_mpi 1 "${train[@]}" --steps 24 --log-json "$tmp/pp_t1.json" >"$logs/pp_t1.log" 2>&1 ||
  fail "tp_train -np 1 (the pipeline reference) exited non-zero (see $logs/pp_t1.log)"
pp_curve() {  # pp_curve NAME REFERENCE.json NP ARGS...: 20 steps of tp_train ARGS against REFERENCE
  local name=$1 ref=$2 np=$3 json=$tmp/pp_${1// /_}.json; shift 3
  run_mpi "$np" "${train[@]}" --steps 20 --log-json "$json" "$@" >"$logs/pp_${name// /_}.log" 2>&1 ||
    fail "tp_train $* at -np $np exited non-zero (see $logs/pp_${name// /_}.log)"
  same_curve "20-step loss curve, $name vs t = 1" "$ref" "$json"
}
pp_curve "tp 2 x pp 2 1f1b m 2" "$tmp/pp_t1.json" 4 --pp 2 --schedule 1f1b --micro-batches 2 \
  --save "$tmp/pp_tp2pp2.safetensors"
pp_curve "pp 2 x dp 2 afab" "$tmp/pp_t1.json" 4 --pp 2 --dp 2
run_mpi 1 "${train[@]}" --steps 20 --layers 4 --log-json "$tmp/pp_t1_L4.json" >"$logs/pp_t1_L4.log" 2>&1 ||
  fail "tp_train -np 1 --layers 4 exited non-zero (see $logs/pp_t1_L4.log)"
pp_curve "pp 4 1f1b m 4" "$tmp/pp_t1_L4.json" 4 --layers 4 --pp 4 --pp-layers 1,1,1,1 --schedule 1f1b \
  --micro-batches 4
run_mpi 1 "${train[@]}" --steps 20 --untie --log-json "$tmp/pp_t1_untied.json" >"$logs/pp_t1_untied.log" 2>&1 ||
  fail "tp_train -np 1 --untie exited non-zero (see $logs/pp_t1_untied.log)"
pp_curve "pp 2 untied" "$tmp/pp_t1_untied.json" 2 --pp 2 --untie
# bf16 (--precision bf16): the stages pass bf16 activations and gradients, which one device would
# hand its next block as they are; only fp32 sums change order (micro-batches, the tied wte's
# halves), so the curves stay within same_curve's 1e-4 of the bf16 run at the same t (measured
# 2.1e-5 for pp 2 vs t = 1, 4.3e-5 for tp 2 × pp 2 vs tp 2).
run_mpi 1 "${train[@]}" --steps 20 --precision bf16 --log-json "$tmp/pp_t1_bf16.json" \
  >"$logs/pp_t1_bf16.log" 2>&1 || fail "tp_train -np 1 --precision bf16 exited non-zero (see $logs/pp_t1_bf16.log)"
pp_curve "pp 2 1f1b m 2 bf16" "$tmp/pp_t1_bf16.json" 2 --pp 2 --schedule 1f1b --micro-batches 2 \
  --precision bf16
run_mpi 2 "${train[@]}" --steps 20 --precision bf16 --log-json "$tmp/pp_t2_bf16.json" \
  >"$logs/pp_t2_bf16.log" 2>&1 || fail "tp_train -np 2 --precision bf16 exited non-zero (see $logs/pp_t2_bf16.log)"
pp_curve "tp 2 x pp 2 bf16 (pp alone: the reference is tp 2)" "$tmp/pp_t2_bf16.json" 4 --pp 2 --precision bf16
# Each stage's schedule as it ran, its micro-batches in flight against the formula.
if grep -q "stage 1: F0 B0 F1 B1 | in flight 1 (formula 1)" "$logs/pp_tp_2_x_pp_2_1f1b_m_2.log" 2>/dev/null; then
  pass 1; echo "✓ tp 2 × pp 2 1f1b: $(grep -o 'stage 0: .*' "$logs/pp_tp_2_x_pp_2_1f1b_m_2.log" | head -1)"
else fail "tp 2 × pp 2 1f1b: no schedule line for stage 1 (see $logs/pp_tp_2_x_pp_2_1f1b_m_2.log)"; fi

# 3. The (tp 2, pp 2) checkpoint holds global tensors: it resumes at tp 4 and at t = 1 on the curve
#    of the uninterrupted t = 1 run (steps 21..24).
run_mpi 4 "${train[@]}" --steps 4 --load "$tmp/pp_tp2pp2.safetensors" --log-json "$tmp/pp_resume4.json" \
  >"$logs/pp_resume4.log" 2>&1 || fail "resuming the tp 2 × pp 2 checkpoint at tp 4 exited non-zero (see $logs/pp_resume4.log)"
same_curve "tp 2 × pp 2 checkpoint resumed at tp 4 × pp 1" "$tmp/pp_t1.json" "$tmp/pp_resume4.json" 20
run_mpi 1 "${train[@]}" --steps 4 --load "$tmp/pp_tp2pp2.safetensors" --log-json "$tmp/pp_resume1.json" \
  >"$logs/pp_resume1.log" 2>&1 || fail "resuming the tp 2 × pp 2 checkpoint at t = 1 exited non-zero (see $logs/pp_resume1.log)"
same_curve "tp 2 × pp 2 checkpoint resumed at t = 1" "$tmp/pp_t1.json" "$tmp/pp_resume1.json" 20

# 3b. ZeRO-1 on a pipeline: each stage's DP group shards that stage's AdamW state; t = 1's curve,
#     and its checkpoint (moments gathered whole) resumes at tp 2 × pp 1 without ZeRO.
pp_curve "pp 2 x dp 2 1f1b m 2 zero 1" "$tmp/pp_t1.json" 4 --pp 2 --dp 2 --zero 1 --schedule 1f1b \
  --micro-batches 2 --save "$tmp/pp_zero.safetensors"
run_mpi 2 "${train[@]}" --steps 4 --load "$tmp/pp_zero.safetensors" --log-json "$tmp/pp_zero_resume2.json" \
  >"$logs/pp_zero_resume2.log" 2>&1 || fail "resuming the pp 2 × dp 2 ZeRO-1 checkpoint at tp 2 exited non-zero (see $logs/pp_zero_resume2.log)"
same_curve "pp 2 × dp 2 ZeRO-1 checkpoint resumed at tp 2 × pp 1" "$tmp/pp_t1.json" "$tmp/pp_zero_resume2.json" 20

# 4. --trace with --pp: every stage's ops as Phase spans ("F0", "B0", …) in the Perfetto trace.
run_mpi 2 "${train[@]}" --steps 2 --pp 2 --schedule 1f1b --micro-batches 2 --trace "$tmp/pp_trace.json" \
  >"$logs/pp_trace.log" 2>&1 || fail "tp_train --pp 2 --trace exited non-zero (see $logs/pp_trace.log)"
phases=$(grep -o '"name": "[FB][0-9]*", "cat": "phase"' "$tmp/pp_trace.json" 2>/dev/null | wc -l)
if [ "$phases" -eq 8 ]; then pass 1; echo "✓ tp_train --pp 2 --trace: 8 labelled F/B ops (2 stages × m 2 × 2)"
else fail "tp_train --pp 2 --trace: $phases labelled F/B ops in $tmp/pp_trace.json, expected 8"; fi
