#!/usr/bin/env bash
# run-lessons.sh — the whole tour: every lesson of lessons/lessons.txt in order, each under mpirun
# with its own rank count, its output on the terminal (and in $BUILD/run-logs/lesson_NAME.log).
# Ends with a summary, one line per lesson: name, ranks, PASSED/FAILED, what its last line reports
# ("PASSED: Q quantities checked against one device (…); F other facts checked" → Q and F; on
# failure "FAILED: D of N comparisons differ" → "D of N"), seconds. Exit 0 when every lesson ends
# in PASSED.
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
  # "PASSED: Q quantit… ; F other fact…" → Q and F; "FAILED: D of N comparisons" → "D of N".
  quantities=$(echo "$last" | sed -n 's/^PASSED: \([0-9][0-9]*\) quantit.*/\1/p')
  facts=$(echo "$last" | sed -n 's/.* \([0-9][0-9]*\) other fact.*/\1/p')
  [ "${last#FAILED}" != "$last" ] && quantities=$(echo "$last" | sed -n 's/^FAILED: \([0-9]* of [0-9]*\) comparisons.*/\1/p')
  if [ "$rc" = 0 ] && [ "${last#PASSED}" != "$last" ]; then result=PASSED
  else
    result=FAILED; fail=1
    echo "lesson $name FAILED (exit $rc)"
  fi
  summary+=("$(printf '%-26s %5s  %-6s  %12s  %5s  %7s' "$name" "$np" "$result" "${quantities:--}" "${facts:-0}" "$secs")")
done < <(lesson_list)
total=$(awk -v a="$total_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo
echo "================ summary (logs: $logs/)"
printf '%-26s %5s  %-6s  %12s  %5s  %7s\n' lesson ranks result "vs 1 device" facts seconds
for line in "${summary[@]}"; do echo "$line"; done
passed=$(printf '%s\n' "${summary[@]}" | grep -c ' PASSED ')
echo "${#summary[@]} lessons: $passed PASSED, $((${#summary[@]} - passed)) FAILED, $total s"
exit $fail
