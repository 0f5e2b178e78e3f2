# shellcheck shell=bash disable=SC2154  # sourced by run-tests.sh, which sets $logs, pass, fail
# bench.sh — make bench's judging logic (sourced by scripts/run-tests.sh, section 8b).
# scripts/bench.py --selftest: medians and min–max spreads; ✓ only when every run meets the goal,
# ✗ only when every run misses it, ~ when they straddle it (made-up runs that would pass a
# judge looking at the median alone); a wrong value fails a row whatever its timings; the WARNING
# line above a 0.5 load average; the Markdown tables' columns; and the parsers on the programs'
# formats (lesson 11's page included). No timing runs: nothing here depends on the machine's load.
bench_log=$logs/bench_selftest.log
if python3 scripts/bench.py --selftest >"$bench_log" 2>&1; then
  pass 1; echo "✓ $(tail -1 "$bench_log")"
else
  fail "scripts/bench.py --selftest: $(grep -m1 '^✗' "$bench_log" || tail -1 "$bench_log") (see $bench_log)"
fi
