#!/usr/bin/env bash
# run-lessons.sh — the whole tour: every lesson of lessons/lessons.txt in order, each under mpirun
# with its own rank count, its output on the terminal (and in $BUILD/run-logs/lesson_NAME.log).
# Ends with a summary, one line per lesson: name, ranks, PASSED/FAILED, what its last line reports
# ("PASSED: Q quantities checked against one device (…); F other facts checked" → Q and F; on
# failure "FAILED: D of N comparisons differ" → "D of N"), seconds. Exit 0 when every lesson ends
# in PASSED.
#
#   scripts/run-lessons.sh --pages   (make lesson-check) also compares each lesson's output with
#       its page (scripts/lesson-pages.py check: timings and rounding aside, within the tolerances
#       it states), a "page" column in the summary, and runs the check's self-test on these logs;
#       exit 0 when every lesson passed and every page agrees. Cheap enough to repeat under another
#       OpenBLAS core type (OPENBLAS_CORETYPE=Sandybridge make lesson-check; .ci/run does).
set -u
cd "$(dirname "$0")/.." || exit 2
. scripts/common.sh
pages=0
[ "${1:-}" = --pages ] && pages=1
logs=$BUILD/run-logs
mkdir -p "$logs"
fail=0
summary=()
total_start=$(date +%s.%N)
while read -r name np; do
  log=$logs/lesson_$name.log
  # A lesson's launch column (lessons/lessons.txt, e.g. two simulated nodes): its mpirun flags.
  if ! launch=$(lesson_launch_flags "$name" "$np"); then
    echo; echo "$launch"; summary+=("$(printf '%-26s %5s  %-6s' "$name" "$np" skipped)"); continue
  fi
  echo
  echo "================ lesson $name  ($MPIEXEC ${launch:+$launch }-np $np $BUILD/bin/lesson_$name)"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  timeout 300 "$MPIEXEC" $MPI_FLAGS $launch -np "$np" "$BUILD/bin/lesson_$name" </dev/null 2>&1 | tee "$log"
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
  page=
  if [ $pages = 1 ]; then
    if python3 scripts/lesson-pages.py check "$name" "$log" >"$logs/page_$name.diff" 2>&1; then page=agrees
    else page=DIFFERS; fail=1; cat "$logs/page_$name.diff"; fi
  fi
  summary+=("$(printf '%-26s %5s  %-6s  %12s  %5s  %7s%s' "$name" "$np" "$result" "${quantities:--}" "${facts:-0}" "$secs" "${page:+  $page}")")
done < <(lesson_list)
total=$(awk -v a="$total_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo
echo "================ summary (logs: $logs/)"
printf '%-26s %5s  %-6s  %12s  %5s  %7s%s\n' lesson ranks result "vs 1 device" facts seconds "$([ $pages = 1 ] && echo "  page")"
for line in "${summary[@]}"; do echo "$line"; done
passed=$(printf '%s\n' "${summary[@]}" | grep -c ' PASSED ')
skips=$(printf '%s\n' "${summary[@]}" | grep -c ' skipped$')
if [ $pages = 1 ]; then
  python3 scripts/lesson-pages.py selftest "$logs" >"$logs/page_selftest.log" 2>&1 || fail=1
  head -n -1 "$logs/page_selftest.log" | grep '^✗'; tail -1 "$logs/page_selftest.log"
  differ=$(printf '%s\n' "${summary[@]}" | grep -c ' DIFFERS$')
  core=${OPENBLAS_CORETYPE:+, OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE}
  echo "${#summary[@]} lessons: $passed PASSED, $((${#summary[@]} - passed)) FAILED; pages: $((${#summary[@]} - differ)) agree, $differ differ$core; $total s"
else
  echo "${#summary[@]} lessons: $passed PASSED, $((${#summary[@]} - passed - skips)) FAILED$([ "$skips" != 0 ] && echo ", $skips skipped"), $total s"
fi
exit $fail
