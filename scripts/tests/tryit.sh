# tryit.sh — the "## Try it" problems of the lesson pages (issue 41): each folded answer's command
# runs (once however many answers quote it) and the lines the page quotes are in its output,
# compared as the lesson pages are (scripts/tryit.py, scripts/lesson-pages.py's rules); then the
# self-test: in each answer a number changed beyond the tolerance must be caught. Sourced by
# scripts/run-tests.sh (section 8b).
if MPI_FLAGS="$MPI_FLAGS" python3 scripts/tryit.py selftest >"$logs/tryit.log" 2>&1; then
  pass 1; tail -1 "$logs/tryit.log"
else
  fail "a Try it answer differs from its program's output (see $logs/tryit.log)"
  grep '^✗' "$logs/tryit.log" | head -10
fi
