#!/usr/bin/env bash
# run-tests.sh — runs every test and every lesson and ends with one line "N passed, M failed".
#
#   serial GoogleTest binary        each test counts
#   MPI GoogleTest binary at NP     each test at each rank count counts (a test fails if it failed
#                                   on any rank)
#   every lesson at its rank count  counts once (exit 0 and PASSED)
#   bad-input and failure checks    wrong rank count, unknown flag, missing GPU backend, one rank
#                                   failing: each must exit non-zero, quickly, with a clear line
# Full logs go to $BUILD/test-logs/. Exit 0 only when nothing failed.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/common.sh
NP=${NP:-1 2 3 4}
logs=$BUILD/test-logs
mkdir -p "$logs"
passed=0 failed=0 skipped=0
failures=()

pass() { passed=$((passed + $1)); }
fail() { failed=$((failed + 1)); failures+=("$1"); echo "✗ $1"; }
run_mpi() { local np=$1; shift; timeout "${TIMEOUT:-300}" "$MPIEXEC" $MPI_FLAGS -np "$np" "$@" </dev/null; }

# 1. Serial tests.
log=$logs/test_serial.log
"$BUILD/bin/test_serial" >"$log" 2>&1
rc=$?
p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
pass "${p:-0}"; skipped=$((skipped + ${s:-0}))
if [ -n "$f" ] && [ "$f" != 0 ]; then
  grep '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | while read -r line; do echo "✗ serial: ${line#*] }"; done
  failed=$((failed + f)); failures+=("test_serial: $f failed (see $log)")
elif [ $rc != 0 ] || [ -z "$p" ]; then
  fail "test_serial exited $rc without a result (see $log)"
else
  echo "✓ test_serial: ${p} passed"
fi

# 2. MPI tests at every rank count.
for np in $NP; do
  log=$logs/test_mpi.np$np.log
  run_mpi "$np" "$BUILD/bin/test_mpi" >"$log" 2>&1
  rc=$?
  line=$(grep '^tp-tests:' "$log" | tail -1)
  if [ -z "$line" ]; then
    fail "test_mpi -np $np exited $rc without a result (crash or timeout; see $log)"
    continue
  fi
  p=$(echo "$line" | sed 's/.*passed=\([0-9]*\).*/\1/'); f=$(echo "$line" | sed 's/.*failed=\([0-9]*\).*/\1/')
  s=$(echo "$line" | sed 's/.*skipped=\([0-9]*\).*/\1/')
  pass "$p"; skipped=$((skipped + s))
  if [ "$f" != 0 ]; then
    grep '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | while read -r l; do echo "✗ np=$np: ${l#*] }"; done
    failed=$((failed + f)); failures+=("test_mpi -np $np: $f failed (see $log)")
  else
    echo "✓ test_mpi -np $np: $p passed$([ "$s" != 0 ] && echo ", $s skipped")"
  fi
done

# 3. Every lesson at its rank count.
while read -r name np; do
  log=$logs/lesson_$name.log
  if run_mpi "$np" "$BUILD/bin/lesson_$name" >"$log" 2>&1 && grep -q '^PASSED' "$log"; then
    pass 1; echo "✓ lesson $name (-np $np): $(grep '^PASSED' "$log")"
  else
    fail "lesson $name (-np $np): $(grep -E '^(FAILED|error|rank)' "$log" | head -1) (see $log)"
  fi
done < <(lesson_list)

# 4. Bad input and failures: exit code, one clear line, no hang.
expect() {  # expect NAME EXPECTED_RC NEEDLE NP PROGRAM ARGS...
  local name=$1 want=$2 needle=$3 np=$4; shift 4
  local log=$logs/check_${name// /_}.log rc
  SECONDS=0
  TIMEOUT=60 run_mpi "$np" "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" = 124 ]; then
    fail "$name: hung (killed after 60 s)"
  elif { [ "$want" = nonzero ] && [ "$rc" != 0 ]; } || [ "$rc" = "$want" ]; then
    if grep -qF -- "$needle" "$log"; then pass 1; echo "✓ $name: exit $rc after ${SECONDS}s, says: $(grep -F -- "$needle" "$log" | head -1)"
    else fail "$name: exit $rc but the output lacks '$needle' (see $log)"; fi
  else
    fail "$name: exit $rc, expected $want (see $log)"
  fi
}
expect "wrong rank count" 2 "mpirun -np 3 build/bin/lesson_02_column_parallel" 2 "$BUILD/bin/lesson_02_column_parallel"
expect "unknown flag" 2 "unknown option --stpe" 3 "$BUILD/bin/lesson_02_column_parallel" --stpe
expect "bad value" 2 "--backend=tpu: expected one of cpu, gpu" 2 "$BUILD/bin/lesson_01_block_matmul" --backend=tpu
expect "no GPU backend" 2 "--backend gpu: this build has no GPU backend" 2 "$BUILD/bin/lesson_01_block_matmul" --backend gpu
expect "non-divisible size" 2 "error: fc1.out=7 is not divisible by t=3 (the number of ranks); run with t in {1, 7} or change fc1.out" 3 "$BUILD/bin/fail_one_rank" --mode=bad-input
expect "one rank fails" nonzero "rank 1: error: rank 1 fails on purpose" 3 "$BUILD/bin/fail_one_rank" --mode=one-rank

echo
for f in "${failures[@]:+${failures[@]}}"; do echo "failed: $f"; done
echo "$passed passed, $failed failed$([ "$skipped" != 0 ] && echo ", $skipped skipped")"
[ "$failed" = 0 ]
