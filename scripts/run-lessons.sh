#!/usr/bin/env bash
# run-lessons.sh — the whole tour: every lesson of lessons/lessons.txt in order, each under mpirun
# with its own rank count, its output on the terminal (and in $BUILD/run-logs/lesson_NAME.log).
# Ends with a summary, one line per lesson: name, ranks, PASSED/FAILED, the number of checks its
# last line reports ("PASSED (N checks …)", or "F of N" from "FAILED (F of N checks)"), seconds. Exit 0 when every lesson ends in PASSED.
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/common.sh
logs=$BUILD/run-logs
mkdir -p "$logs"
fail=0
summary=()
total_start=$(date +%s.%N)
while read -r name np; do
  log=$logs/lesson_$name.log
  echo
  echo "================ lesson $name  ($MPIEXEC -np $np $BUILD/bin/lesson_$name)"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout 300 "$MPIEXEC" $MPI_FLAGS -np "$np" "$BUILD/bin/lesson_$name" </dev/null 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  last=$(grep -E '^(PASSED|FAILED)' "$log" | tail -1)
  # "PASSED (N checks …)" → N; "FAILED (F of N checks)" → "F of N" (failed of all).
  checks=$(echo "$last" | sed -n 's/^[^0-9]*\([0-9][0-9]*\( of [0-9][0-9]*\)\{0,1\}\) checks.*/\1/p')
  if [ "$rc" = 0 ] && [ "${last#PASSED}" != "$last" ]; then result=PASSED
  else
    result=FAILED; fail=1
    echo "lesson $name FAILED (exit $rc)"
  fi
  summary+=("$(printf '%-26s %5s  %-6s  %8s  %7s' "$name" "$np" "$result" "${checks:--}" "$secs")")
done < <(lesson_list)
total=$(awk -v a="$total_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo
echo "================ summary (logs: $logs/)"
printf '%-26s %5s  %-6s  %8s  %7s\n' lesson ranks result checks seconds
for line in "${summary[@]}"; do echo "$line"; done
passed=$(printf '%s\n' "${summary[@]}" | grep -c ' PASSED ')
echo "${#summary[@]} lessons: $passed PASSED, $((${#summary[@]} - passed)) FAILED, $total s"
exit $fail
