# budget.sh — tp_train --memory-budget MiB (issue 22; sourced by scripts/run-tests.sh, section 8b).
#
# tp_train's default model at -np 4 --dp 2 (tp 2 × dp 2, batch 8) peaks at 2.5 MiB per rank
# (weights, gradients, AdamW and activations in fp32; lib/model/memory_budget.h). Over a budget it
# stops before building the model with one line naming the largest part and the cheapest option
# that fits, searched in the articles' order (--precision bf16, --recompute full (selective keeps
# what none keeps: attention keeps no S × S tensor),
# --micro-batches, --zero 1, and a larger t last); a budget below every option is one line too; each exit 2. Within it
# the run trains and checks the memory ledger's peak after step 1 against the budget. Then
# tp_preflight's memory-stack table for llama2-70b on 8 × 8 GPUs and its bad input (exit 2).

expect "--memory-budget: mixed precision fits" 2 \
  "activations the largest (weights 0.2 MiB, gradients 0.2 MiB, optimizer state 0.5 MiB, activations 1.5 MiB); the cheapest option that fits: --precision bf16 (1.8 MiB)" \
  4 "${tt[@]}" --dp 2 --memory-budget 2.2
expect "--memory-budget: a run already in bf16 is offered recomputation before a larger t" 2 \
  "precision=bf16 recompute=none micro-batches=1 zero=0) peaks at 1.8 MiB per rank, activations the largest (weights 0.4 MiB, gradients 0.2 MiB, optimizer state 0.5 MiB, activations 0.8 MiB); the cheapest option that fits: --recompute full (1.6 MiB)" \
  4 "${tt[@]}" --dp 2 --precision bf16 --memory-budget 1.7
expect "--memory-budget: micro-batches fit" 2 "the cheapest option that fits: --micro-batches 2 (1.7 MiB)" \
  4 "${tt[@]}" --dp 2 --memory-budget 1.75
if run_mpi 4 "${tt[@]}" --dp 2 --precision bf16 --memory-budget 2.1 >"$logs/budget_bf16.log" 2>&1 &&
  grep -q "memory-budget: step 1 held 1.8 MiB per rank (ledger) of 2.1 MiB" "$logs/budget_bf16.log"; then
  pass 1; echo "✓ --precision bf16 --memory-budget 2.1 at tp 2 × dp 2: $(grep -o 'step 1 held.*' "$logs/budget_bf16.log")"
else fail "--precision bf16 --memory-budget 2.1: not within the budget (see $logs/budget_bf16.log)"; fi
expect "--memory-budget: too small for any option" 2 "no option fits (the smallest of" \
  2 "${tt[@]}" --memory-budget 1  # the smallest budget taken (1 MiB)
if run_mpi 4 "${tt[@]}" --dp 2 --memory-budget 3 >"$logs/budget_fits.log" 2>&1 &&
  grep -q "memory-budget: step 1 held 2.5 MiB per rank (ledger) of 3.0 MiB" "$logs/budget_fits.log"; then
  pass 1; echo "✓ --memory-budget 3 at tp 2 × dp 2: $(grep -o 'step 1 held.*' "$logs/budget_fits.log")"
else fail "--memory-budget 3 at tp 2 × dp 2: no run within the budget (see $logs/budget_fits.log)"; fi
# The option the budget named runs within it (the ledger's check after step 1).
if run_mpi 4 "${tt[@]}" --dp 2 --memory-budget 2 --micro-batches 2 >"$logs/budget_named.log" 2>&1 &&
  grep -q "memory-budget: step 1 held 1.7 MiB" "$logs/budget_named.log"; then
  pass 1; echo "✓ --memory-budget 2 with the named --micro-batches 2: $(grep -o 'step 1 held.*' "$logs/budget_named.log")"
else fail "--memory-budget 2 --micro-batches 2: not within the budget (see $logs/budget_named.log)"; fi

# tp_preflight's side of the memory stack: the table for a named model, and its bad input.
expect "tp_preflight: the memory stack of llama2-70b, its bf16 row" 0 "+ --precision bf16" 1 \
  "$BUILD/bin/tp_preflight" --model llama2-70b -t 8 --nodes 8 --gpus-per-node 8 --batch 4 --micro-batches 4
expect "tp_preflight: the memory stack of llama2-70b on 8 x 8 GPUs" 0 "+ --zero 1 (dp = 8)" 1 \
  "$BUILD/bin/tp_preflight" --model llama2-70b -t 8 --nodes 8 --gpus-per-node 8 --batch 4 --micro-batches 4
expect "tp_preflight: --precision bf16's peak" 0 "peak, bf16: --recompute none" 1 \
  "$BUILD/bin/tp_preflight" -t 2 --precision bf16
expect "tp_preflight: --precision and --dtype disagree" 2 "--precision=bf16 and --dtype=fp32 disagree" 1 \
  "$BUILD/bin/tp_preflight" -t 2 --precision bf16 --dtype fp32
expect "tp_preflight: --zero 1 with dp 1" 2 "--zero 1 with dp=1: ZeRO-1 shards the optimizer state" 1 \
  "$BUILD/bin/tp_preflight" -t 2 --zero 1
expect "tp_preflight: --micro-batches not dividing the batch" 2 "--micro-batches=3 does not divide --batch=8" 1 \
  "$BUILD/bin/tp_preflight" -t 2 --micro-batches 3
