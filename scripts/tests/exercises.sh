# exercises.sh — every exercise both ways (exercises/README.md, scripts/exercise.sh): as the tree
# has it (not written yet: exit 2 within 30 s and the one line naming its file; written: PASSED)
# and with the library's own body (REFERENCE=1: PASSED). Every exercise's program is built first,
# two at a time. Sourced by scripts/run-tests.sh (section 8b).
if scripts/exercise.sh --build-all >"$logs/exercises_build.log" 2>&1; then
  pass 1; echo "✓ exercises: $(ls exercises/[0-9][0-9]_*.cpp | wc -l) programs built with the exercise in place of the library's body"
else
  fail "exercises: a program did not build (see $logs/exercises_build.log)"
fi
for ex in exercises/[0-9][0-9]_*.cpp; do
  n=$(basename "$ex"); n=${n%%_*}
  SECONDS=0
  out=$(scripts/exercise.sh "$n" 2>&1); rc=$?
  if grep -q 'TP_EXERCISE_TODO' "$ex"; then
    if [ "$rc" = 2 ] && [ "$out" = "exercise $n is not written yet: $ex" ] && [ "$SECONDS" -le 30 ]; then
      pass 1; echo "✓ exercise $n, not written yet: exit 2 after ${SECONDS}s, one line: $out"
    else
      fail "exercise $n, not written yet: exit $rc after ${SECONDS}s, expected 2 within 30 s and one line; got: $(echo "$out" | head -3)"
    fi
  elif [ "$rc" = 0 ]; then
    pass 1; echo "$out (the learner's body)"
  else
    fail "exercise $n, written: $(echo "$out" | head -1)"
  fi
  out=$(scripts/exercise.sh --reference "$n" 2>&1); rc=$?
  if [ "$rc" = 0 ]; then pass 1; echo "$out"
  else fail "exercise $n with the library's body: $(echo "$out" | head -1)"; fi
done
