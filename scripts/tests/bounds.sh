# bounds.sh — issue 39's counts and floors (sourced by scripts/run-tests.sh, section 8b).
#
# Every count a flag takes has a bound in reason, stated in --help and refused beyond it in one
# line (no run for hours, no truncation to an int); a real flag below its smallest meaningful value
# is refused instead of meaning "off"; a given --peak-tflops whose MFU passes 100 % warns once;
# tp_preflight refuses what tp_train refuses, with the same words and defaults; tp_tokenize checks
# its writes and ends quietly on a closed pipe.

# 1. Counts: refused beyond their bound, in one line, within seconds.
expect "--eval-batches 100000000" 2 "--eval-batches=100000000: must be in [1, 10000]" 1 \
  "${tt[@]}" --eval-every 1 --eval-batches 100000000
expect "--eval-batches 2^32+1" 2 "--eval-batches=4294967297: must be in [1, 10000]" 1 \
  "${tt[@]}" --eval-every 1 --eval-batches 4294967297
expect "--keep 2^32+1 (not kept as 1)" 2 "--keep=4294967297: must be in [1, 1000]" 1 \
  "${tt[@]}" --save "$tmp/bounds/" --save-every 1 --keep 4294967297
for flag in warmup decay-steps save-every eval-every log-every; do
  expect "--$flag 2^40" 2 "--$flag=1099511627776: must be" 1 "${tt[@]}" "--$flag" 1099511627776
done
expect "tp_tokenize --passes 2^32+1" 2 "--passes=4294967297: must be in [1, 1000]" 1 \
  "$BUILD/bin/tp_tokenize" --bench --passes 4294967297
expect "tp_generate --tokens 2^40" 2 "--tokens=1099511627776: must be <= 1048576" 1 \
  "$BUILD/bin/tp_generate" --load "$tmp/none.safetensors" --prompt TP --tokens 1099511627776
log=$logs/check_bounds_help.log
run_mpi 1 "$BUILD/bin/tp_train" --help >"$log" 2>&1
if grep -q -- '--keep=N .*(default: 3; in \[1, 1000\])' "$log" &&
   grep -q -- '--eval-batches=N .*(default: 4; in \[1, 10000\])' "$log" &&
   grep -q -- '--memory-budget=X .*(default: 0; 0 or >= 1)' "$log" &&
   grep -q -- '--stall-timeout=X .*(default: 60; 0 or >= 1)' "$log"; then
  pass 1; echo "✓ tp_train --help states the bounds of --keep, --eval-batches, --memory-budget, --stall-timeout"
else fail "tp_train --help lacks a bound of --keep, --eval-batches, --memory-budget or --stall-timeout (see $log)"; fi

# 2. Reals below their smallest meaningful value: refused, not "off" or a busy loop.
expect "--memory-budget 1e-300 (not off)" 2 "--memory-budget=1e-300: must be 0 or >= 1" 1 \
  "${tt[@]}" --memory-budget 1e-300
expect "--stall-timeout 0.001" 2 "--stall-timeout=0.001: must be 0 or >= 1" 1 "${tt[@]}" --stall-timeout 0.001
expect "--peak-tflops 1e-300" 2 "--peak-tflops=1e-300: must be 0 or >= 0.001" 1 "${tt[@]}" --peak-tflops 1e-300

# 3. tp_preflight refuses what tp_train refuses, with the same words (one declaration of --pp and
# --schedule, lib/model/pipeline_plan.h) and the same defaults: --pp 2 plans tp_train's afab.
for pp in 0 -1; do
  expect "tp_preflight --pp $pp" 2 "error: --pp=$pp: must be in [1, 1024]" 1 "$BUILD/bin/tp_preflight" --pp "$pp"
  expect "tp_train --pp $pp (the same words)" 2 "error: --pp=$pp: must be in [1, 1024]" 1 "${tt[@]}" --pp "$pp"
done
expect "tp_preflight --model= (not the default model)" 2 "--model=: expected one of gpt2-small" 1 \
  "$BUILD/bin/tp_preflight" --model=
expect "tp_preflight --pp 2 on tp_train's defaults" 0 "# problems: 0" 1 "$BUILD/bin/tp_preflight" --pp 2
expect "tp_train --schedule wrong (the preflight's words)" 2 "--schedule=afb: expected one of afab, 1f1b" 1 \
  "${tt[@]}" --schedule afb

# 4. A given --peak-tflops below what the run reaches: MFU past 100 % warns once, naming the flag.
name="--peak-tflops below the machine's"
expect "$name" 0 "is below this machine's; give its real peak or leave --peak-tflops out" 1 \
  "${train[@]}" --steps 4 --log-every 1 --peak-tflops 0.001
n=$(grep -c 'warning: MFU' "$logs/check_${name// /_}.log")
if [ "$n" = 1 ]; then pass 1; echo "✓ $name: one warning in 4 steps"
else fail "$name: $n warnings in 4 steps, not 1 (see $logs/check_${name// /_}.log)"; fi
