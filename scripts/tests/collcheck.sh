# shellcheck shell=bash disable=SC2154,SC2046  # sourced by run-tests.sh ($tmp, $logs, $BUILD, train); $(...) adds a flag or nothing
# collcheck.sh — a mismatched collective is named, not hung (issue 24, item 5): with
# --check-collectives or TP_CHECK_COLLECTIVES=1 (lib/core/checked_communicator.h) the ranks agree on
# each collective's fingerprint first, and a rank that skips an all-reduce, calls it with another
# size or calls another op ends the job within seconds with one line, exit 2. A rank that never
# arrives is the stall detector's (launcher/watchdog.h). Sourced by scripts/run-tests.sh, section
# 8b (expect, pass, fail, run_mpi, $tmp, $logs, $BUILD, train in scope).

cm="$BUILD/bin/collective_mismatch"
# others NP: "rank 0" or "ranks 0, 1, ..., NP-2", the ranks that did it right.
collcheck_others() {
  if [ "$1" = 2 ]; then echo "rank 0"; else echo "ranks $(seq -s ', ' 0 $(($1 - 2)))"; fi
}

# 1. MPI at np 2-4: the three faults, each named in one line (the last rank is the faulty one; the
# all-gather's full buffer is 4096 rounded down to a multiple of np).
for np in 2 3 4; do
  last=$((np - 1)) others=$(collcheck_others $np) full=$((4096 / np * np))
  head="error: collective #5 on the world ($np ranks): rank $last called"
  right="$others called all_reduce(4096 floats, 'mlp fc2') (--check-collectives)"
  expect "collcheck: np $np, a rank skips the all-reduce" 2 \
    "$head all_gather($full floats, 'attn qkv'), $right" $np "$cm" --mode=skip --check-collectives
  expect "collcheck: np $np, a rank all-reduces another size" 2 \
    "$head all_reduce(4104 floats, 'mlp fc2'), $right" $np "$cm" --mode=size --check-collectives
  expect "collcheck: np $np, a rank calls another op" 2 \
    "$head broadcast(4096 floats from rank 0, 'mlp fc2'), $right" $np "$cm" --mode=op --check-collectives
done
# The environment variable, an asynchronous all-reduce, a sub-group (the group's rank 0 says it and
# aborts the job, exit 2), a good run, a bad value of the variable.
TP_CHECK_COLLECTIVES=1 expect "collcheck: TP_CHECK_COLLECTIVES=1, async all-reduce skipped" 2 \
  "error: collective #5 on the world (3 ranks): rank 2 called all_gather(4095 floats, 'attn qkv'), ranks 0, 1 called all_reduce(4096 floats, 'mlp fc2')" \
  3 "$cm" --mode=skip --async
TP_CHECK_COLLECTIVES=1 WITHIN=15 expect "collcheck: a sub-group's mismatch" 2 \
  "rank 1: error: collective #5 on the group of world ranks 1, 3: rank 1 (world rank 3) called all_reduce(4104 floats, 'mlp fc2'), rank 0 (world rank 1) called all_reduce(4096 floats, 'mlp fc2')" \
  4 "$cm" --mode=size --subgroup
TP_CHECK_COLLECTIVES=1 expect "collcheck: nothing wrong, checked" 0 "PASSED: 5 steps on checked mpi" 4 \
  "$cm" --async
TP_CHECK_COLLECTIVES=maybe expect "collcheck: TP_CHECK_COLLECTIVES=maybe" 2 \
  "error: TP_CHECK_COLLECTIVES=maybe: give 1 to check" 2 "$cm"

# 2. A rank that never arrives (it skips the all-reduce, then computes for 600 s): with or without
# the check, the stall detector names it and the all-reduce the others wait in.
for check in "" --check-collectives; do
  name="collcheck: a rank never arrives${check:+, checked}"
  WITHIN=15 expect "$name" nonzero "rank 2 (pid" 3 "$cm" --mode=never --stall-timeout 3 $check
  grep -q "^error: no progress for [0-9.]* s: rank 2 (pid [0-9]*, host [^,]*, at step 3, outside any collective); ranks 0, 1 wait in all_reduce (a group of 3 ranks, 'mlp fc2')" \
    "$logs/check_${name// /_}.log" ||
    fail "$name: the line does not name rank 2 and the all-reduce the others wait in (see $logs/check_${name// /_}.log)"
done

# 3. The NCCL path on the CUDA emulator (tests/cuda_emu: NCCL over MPI, one emulated GPU per rank).
if [ -x "$BUILD/emu/bin/collective_mismatch" ]; then
  emu=("$BUILD/emu/bin/collective_mismatch" --backend gpu --comm nccl --check-collectives)
  for np in 2 3; do
    last=$((np - 1)) others=$(collcheck_others $np) full=$((4096 / np * np))
    head="error: collective #5 on the world ($np ranks): rank $last called"
    right="$others called all_reduce(4096 floats, 'mlp fc2')"
    WITHIN=30 expect "collcheck: emulated NCCL np $np, skip" 2 \
      "$head all_gather($full floats, 'attn qkv'), $right" $np "${emu[@]}" --mode=skip
    WITHIN=30 expect "collcheck: emulated NCCL np $np, another size" 2 \
      "$head all_reduce(4104 floats, 'mlp fc2'), $right" $np "${emu[@]}" --mode=size
    WITHIN=30 expect "collcheck: emulated NCCL np $np, another op" 2 \
      "$head broadcast(4096 floats from rank 0, 'mlp fc2'), $right" $np "${emu[@]}" --mode=op
  done
  WITHIN=30 expect "collcheck: emulated NCCL, nothing wrong" 0 "PASSED: 5 steps on checked nccl" 2 \
    "${emu[@]}" --async
fi

# 4. tp_train under the check: the same loss curve as without, bitwise (the check moves its own
# buffers only), at np 2 with sequence parallelism (all-gathers and reduce-scatters too), and at np 4
# as tp 2 x dp 2 with ZeRO-1 (the checked world split into TP and DP groups).
rm -f "$tmp"/collcheck_*.json
for grid in "2 --sp" "4 --dp 2 --zero 1"; do
  np=${grid%% *} tag=np${grid%% *}
  for check in off on; do
    # shellcheck disable=SC2086  # the grid's flags are words on purpose
    run_mpi $np "${train[@]}" --steps 6 ${grid#* } $([ $check = on ] && echo --check-collectives) \
      --log-json "$tmp/collcheck_${tag}_$check.json" >"$logs/collcheck_train_${tag}_$check.log" 2>&1 ||
      fail "tp_train -np $grid, check $check, exited non-zero (see $logs/collcheck_train_${tag}_$check.log)"
  done
  if [ -s "$tmp/collcheck_${tag}_on.json" ] &&
    cmp -s <(losses "$tmp/collcheck_${tag}_off.json") <(losses "$tmp/collcheck_${tag}_on.json"); then
    pass 1; echo "✓ collcheck: tp_train -np $grid --check-collectives: the same 6 losses as without, bitwise"
  else fail "collcheck: tp_train -np $grid --check-collectives changed the loss curve (see $tmp/collcheck_${tag}_*.json)"; fi
done
