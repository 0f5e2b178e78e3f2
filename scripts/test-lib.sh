# test-lib.sh — what scripts/run-tests.sh and the parts it sources (scripts/tests/*.sh) use: the
# counters, pass/fail, run_mpi, expect, the tp_train command arrays and the loss-curve checks.
# Sourced by run-tests.sh after scripts/common.sh; needs $BUILD, $MPIEXEC, $MPI_FLAGS and $logs.
passed=0 failed=0 skipped=0
failures=()

pass() { passed=$((passed + $1)); }
fail() { failed=$((failed + 1)); failures+=("$1"); echo "✗ $1"; }
# group NAME: the checks from here on belong to NAME (a numbered section of run-tests.sh or one
# scripts/tests/ part); summary prints each group's checks and seconds, then the total.
group_names=() group_seconds=() group_checks=() group_start='' group_passed=0 group_failed=0
group() {
  group_end
  # (the clock, not $SECONDS: expect resets that to time each check)
  group_names+=("$1"); group_start=$(date +%s); group_passed=$passed; group_failed=$failed
  echo "== $1"
}
group_end() {
  [ -n "$group_start" ] || return 0
  group_seconds+=($(($(date +%s) - group_start)))
  group_checks+=($((passed - group_passed + failed - group_failed)))
  group_start=''
}
run_mpi() { local np=$1; shift; timeout "${TIMEOUT:-300}" "$MPIEXEC" $MPI_FLAGS -np "$np" "$@" </dev/null; }
# tally NAME LOG RC: counts the "tp-tests: np=N passed=P failed=F skipped=S" line an MPI test binary
# (tests/mpi_main.cpp) prints last; a missing line means it crashed or timed out.
tally() {
  local name=$1 log=$2 rc=$3 line p f s
  line=$(grep '^tp-tests:' "$log" | tail -1)
  if [ -z "$line" ]; then fail "$name exited $rc without a result (crash or timeout; see $log)"; return; fi
  p=$(echo "$line" | sed 's/.*passed=\([0-9]*\).*/\1/'); f=$(echo "$line" | sed 's/.*failed=\([0-9]*\).*/\1/')
  s=$(echo "$line" | sed 's/.*skipped=\([0-9]*\).*/\1/')
  pass "$p"; skipped=$((skipped + s))
  if [ "$f" != 0 ]; then
    grep '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | while read -r l; do echo "✗ $name: ${l#*] }"; done
    failed=$((failed + f)); failures+=("$name: $f failed (see $log)")
  else
    echo "✓ $name: $p passed$([ "$s" != 0 ] && echo ", $s skipped")"
  fi
}

# serial NAME PROGRAM: runs a plain (non-MPI) GoogleTest binary and counts its report.
serial() {
  local name=$1 log=$logs/$1.log rc p f s
  "$2" >"$log" 2>&1
  rc=$?
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  pass "${p:-0}"; skipped=$((skipped + ${s:-0}))
  if [ -n "$f" ] && [ "$f" != 0 ]; then
    grep '^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | while read -r line; do echo "✗ $name: ${line#*] }"; done
    failed=$((failed + f)); failures+=("$name: $f failed (see $log)")
  elif [ $rc != 0 ] || [ -z "$p" ]; then
    fail "$name exited $rc without a result (see $log)"
  else
    echo "✓ $name: ${p} passed"
  fi
}

# The files a failing run must leave alone: name and checksum of every file under $BUILD/test-tmp.
# (Lock files come and go with the runs that hold them, and so do the flight recorder's dumps and
# ring files, flight-rank-*, in a --save folder: launcher/flight_dumps.h; comm needs plain sorted
# lines.)
files_state() { [ -d "$BUILD/test-tmp" ] && find "$BUILD/test-tmp" -type f ! -name '*.log' ! -name '*.lock' ! -name 'flight-rank-*' -exec cksum {} + 2>/dev/null | LC_ALL=C sort; }
expect() {  # [WITHIN=S] expect NAME EXPECTED_RC NEEDLE NP PROGRAM ARGS...
  # Passes when the program exits EXPECTED_RC (or any non-zero code for "nonzero") within S seconds
  # (default 10), its output holds NEEDLE, at most one line says "error:" (bad input is one line
  # from rank 0, not one per rank), and every file that was under $BUILD/test-tmp before is still
  # there, unchanged.
  local name=$1 want=$2 needle=$3 np=$4; shift 4
  local log=$logs/check_${name// /_}.log rc within=${WITHIN:-10} before lost errors
  before=$(files_state)
  SECONDS=0
  TIMEOUT=60 run_mpi "$np" "$@" >"$log" 2>&1
  rc=$?
  lost=$(LC_ALL=C comm -23 <(echo "$before") <(files_state) | awk '{print $3}' | head -3)
  errors=$(grep -c 'error:' "$log")
  if [ "$rc" = 124 ]; then
    fail "$name: hung (killed after 60 s)"
  elif [ "$SECONDS" -gt "$within" ]; then
    fail "$name: took ${SECONDS}s (more than ${within}s; see $log)"
  elif { [ "$want" = nonzero ] && [ "$rc" != 0 ]; } || [ "$rc" = "$want" ]; then
    if ! grep -qF -- "$needle" "$log"; then fail "$name: exit $rc but the output lacks '$needle' (see $log)"
    elif [ "$errors" -gt 1 ]; then fail "$name: $errors lines say 'error:', not one (see $log)"
    elif [ -n "$lost" ]; then fail "$name: changed or removed $(echo $lost) (see $log)"
    else pass 1; echo "✓ $name: exit $rc after ${SECONDS}s, says: $(grep -F -- "$needle" "$log" | head -1)"; fi
  else
    fail "$name: exit $rc, expected $want (see $log)"
  fi
}
# The tp_train runs: $tmp holds their files; train is a small model, tt a one-step run, ld a load.
tmp=$BUILD/test-tmp
train=("$BUILD/bin/tp_train" --layers 2 --hidden 48 --heads 12 --ffn 96 --seq 16 --batch 4 --log-every 1000)
losses() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1"; }
same_curve() {  # [TOL=T] same_curve NAME A.json B.json [FIRST_STEP_OF_B]: relative difference ≤ T (1e-4) at every step
  local name=$1 a=$2 b=$3 skip=${4:-0} tol=${TOL:-1e-4} worst
  worst=$(paste <(losses "$a" | tail -n +$((skip + 1))) <(losses "$b") |
          awk 'NF == 2 { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d; n++ }
               END { if (n == 0) print "none"; else printf "%.2e", w }')
  if [ "$worst" = none ]; then fail "$name: no losses to compare ($a, $b)"
  elif awk -v w="$worst" -v t="$tol" 'BEGIN { exit !(w <= t) }'; then pass 1; echo "✓ $name: largest relative difference $worst"
  else fail "$name: loss curves differ by $worst (> $tol)"; fi
}
# same_bits NAME REF.json RESUMED.json FIRST: the resumed run's losses are the reference's from
# step FIRST + 1 on, as the same decimal strings (%.9g: a float's bits).
same_bits() {
  local name=$1 a=$2 b=$3 first=$4 n diff
  n=$(losses "$b" | wc -l)
  diff=$(paste <(losses "$a" | tail -n +$((first + 1)) | head -n "$n") <(losses "$b") |
         awk '$1 != $2 { d++ } NF != 2 { d++ } END { print d + 0 }')
  if [ "$n" -gt 0 ] && [ "$diff" = 0 ]; then pass 1; echo "✓ $name: $n losses from step $((first + 1)) identical"
  else fail "$name: $diff of $n losses from step $((first + 1)) differ ($a, $b)"; fi
}
# descendants PID: every process under PID.
descendants() { local c; for c in $(ps -o pid= --ppid "$1"); do echo "$c"; descendants "$c"; done; }
tt=("$BUILD/bin/tp_train" --steps 1)
ld=("${train[@]}" --steps 1 --load)

# The ranks of a running mpirun in rank order (MPICH: mpiexec → hydra_pmi_proxy → ranks, with
# PMI_RANK in their environment; Open MPI: mpirun → ranks, OMPI_COMM_WORLD_RANK).
stall_ranks() {
  local launcher=$1 kids p
  kids=$(pgrep -P "$launcher")
  case "$(ps -o comm= -p "$(echo "$kids" | head -1)" 2>/dev/null)" in
    hydra_pmi_prox*) kids=$(for p in $kids; do pgrep -P "$p"; done) ;;
  esac
  for p in $kids; do
    echo "$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^\(PMI_RANK\|OMPI_COMM_WORLD_RANK\)=//p' | head -1) $p"
  done | awk 'NF == 2' | sort -n | awk '{print $2}'
}
# stall_wait_step LOG: until the run's first "step " line (at most 20 s).
stall_wait_step() { for _ in $(seq 200); do grep -q "^step " "$1" && return 0; sleep 0.1; done; return 1; }

# summary: the failures, then the last line "N passed, M failed"; exit status 0 when none failed.
summary() {
  group_end
  echo
  if [ ${#group_names[@]} -gt 0 ]; then
    local i total=0
    echo "time per group (seconds, checks):"
    for i in "${!group_names[@]}"; do
      printf '  %5d s  %5d  %s\n' "${group_seconds[$i]}" "${group_checks[$i]}" "${group_names[$i]}"
      total=$((total + group_seconds[i]))
    done
    printf '  %5d s         total (%d min %02d s)\n' "$total" $((total / 60)) $((total % 60))
  fi
  for f in "${failures[@]:+${failures[@]}}"; do echo "failed: $f"; done
  echo "$passed passed, $failed failed$([ "$skipped" != 0 ] && echo ", $skipped skipped")"
  [ "$failed" = 0 ]
}
