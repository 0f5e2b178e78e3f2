#!/usr/bin/env bash
# exercise.sh — builds, runs and grades the exercises (exercises/README.md); make exercise runs it.
#
#   scripts/exercise.sh 03               exercise 03 with the learner's exercises/03_*.cpp in place
#                                        of the library's body: its grader (a lesson or a test) at
#                                        its rank count; PASSED, or what differed and the
#                                        exercise's "if it fails:" hints
#   scripts/exercise.sh --reference 03   the same grader with the library's own body (must pass)
#   scripts/exercise.sh --all            every exercise, one line each, then "k of n passed"
#   scripts/exercise.sh --build-all      only build every exercise's program (make -j2), for the
#                                        test suite (scripts/tests/exercises.sh)
#
# Exit 0 when PASSED; 2 when the exercise is not written yet (its one line: "exercise 03 is not
# written yet: exercises/03_….cpp"); 1 when it ran and a check failed.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/common.sh
MAKE=${MAKE:-make}
# Link as the build around it was made, with or without the GPU backend ($BUILD/gpu-backend), whatever
# NO_CUDA says here: a different choice would relink every program of the build.
case "$(cat "$BUILD/gpu-backend" 2>/dev/null)" in
  yes) unset NO_CUDA ;;
  "no: NO_CUDA=1") export NO_CUDA=1 ;;
esac

# field FILE NAME: the value of the exercise file's "// NAME: value" line.
field() { sed -n "s|^// $2: *||p" "$1" | head -1; }
file_of() {
  local f
  f=$(ls exercises/"$1"_*.cpp 2>/dev/null | head -1)
  [ -n "$f" ] || { echo "error: no exercise $1 (exercises/$1_*.cpp); the list: exercises/README.md" >&2; return 2; }
  echo "$f"
}

# grade NN [--reference] [--quiet]: builds and runs one exercise; the verdict's lines on stdout.
grade() {
  local n=$1 reference=$2 quiet=$3 file grader prog np args dir bin log rc
  file=$(file_of "$n") || return 2
  grader=$(field "$file" grader)
  read -r prog np args <<<"$grader"
  dir=$BUILD/exercises/$n
  mkdir -p "$dir"
  if [ "$reference" = yes ]; then bin=$BUILD/bin/$prog; log=$dir/reference.log
  else bin=$dir/$prog; log=$dir/run.log; fi
  if ! $MAKE -s --no-print-directory "$bin" >"$dir/build.log" 2>&1; then
    echo "✗ exercise $n does not compile ($file):"; grep -E 'error|Error' "$dir/build.log" | head -8
    return 1
  fi
  # shellcheck disable=SC2086  # args: the grader's flags, split on purpose
  timeout 120 "$MPIEXEC" $MPI_FLAGS -np "$np" "$bin" $args </dev/null >"$log" 2>&1
  rc=$?
  local todo; todo=$(grep -m1 -o "exercise $n is not written yet: exercises/[A-Za-z0-9_]*\.cpp" "$log")
  if [ -n "$todo" ]; then echo "$todo"; return 2; fi
  if [ $rc = 0 ] && { grep -q '^PASSED' "$log" || grep -q '^tp-tests: .* failed=0' "$log"; }; then
    local what; what=$(grep -m1 '^PASSED' "$log" | sed 's/^PASSED//')
    [ -n "$what" ] || what=": $(sed -n 's/^tp-tests: np=\([0-9]*\) passed=\([0-9]*\).*/\2 tests at np \1/p' "$log" | tail -1)"
    echo "✓ exercise $n$([ "$reference" = yes ] && echo " (the library's body)"): PASSED$what"
    return 0
  fi
  echo "✗ exercise $n ($file): mpirun -np $np $bin $args exited $rc (full output: $log)"
  [ "$quiet" = yes ] && return 1
  # What differed: the lesson's FAILED lines, or the tests' failure messages.
  grep -E '^(FAILED|  differs:|  ✗|error|rank [0-9]+: error)|Failure$|^(Expected|  Actual|Which is|Value of|  [A-Za-z_.()]+$)' "$log" |
    awk '!seen[$0]++' | head -20
  echo "hints ($file):"
  sed -n 's|^// if it fails: *|  - |p' "$file"
  return 1
}

case "${1:-}" in
  --build-all)
    $MAKE -s --no-print-directory -j2 exercise-bins ;;
  --all|--reference)
    reference=no; [ "$1" = --reference ] && { reference=yes; shift; }
    if [ "${1:-}" != --all ]; then [ -n "${1:-}" ] || { echo "usage: make exercise N=03 [REFERENCE=1]"; exit 2; }
      grade "$1" "$reference" no; exit; fi
    passed=0 total=0
    for f in exercises/[0-9][0-9]_*.cpp; do
      n=$(basename "$f"); n=${n%%_*}
      total=$((total + 1))
      grade "$n" "$reference" yes && passed=$((passed + 1))
    done
    echo "$passed of $total exercises passed"
    [ "$passed" = "$total" ] ;;
  ''|-h|--help)
    sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0"; exit 2 ;;
  *) grade "$1" no no ;;
esac
