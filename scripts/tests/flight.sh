# shellcheck shell=bash disable=SC2154  # sourced by run-tests.sh ($tmp, $logs, $BUILD, train)
# flight.sh — the flight recorder and tp_flight (issue 44, items 1-3: observe/flight_recorder.h,
# launcher/flight_dumps.h, observe/flight_analysis.h). Each failure the project already names (a
# stopped rank, a rank that skips a collective, one with another count, a SIGKILL while the others
# wait in an all-reduce) leaves one dump per rank that could write one, and tp_flight's first line
# names the right rank, op and sequence number. Then the escalation's timing (a stall to the dumps,
# the watchdog's line and the job's end: at most --stall-timeout + 5 s), a live snapshot (SIGUSR1),
# and the bad inputs. Sourced by scripts/run-tests.sh (expect, pass, fail, $tmp, $logs, $BUILD).

fl="$BUILD/bin/tp_flight"
cm="$BUILD/bin/collective_mismatch"
# flight_dir NAME: an empty folder for one run's dumps.
flight_dir() { rm -rf "$tmp/flight_$1"; mkdir -p "$tmp/flight_$1"; echo "$tmp/flight_$1"; }
# flight_check NAME DIR NEEDLE: tp_flight DIR exits 0 and its first line holds NEEDLE.
flight_check() {
  local name=$1 dir=$2 needle=$3 out rc
  out=$("$fl" "$dir" 2>&1); rc=$?
  if [ "$rc" = 0 ] && [[ "$(echo "$out" | head -1)" == *"$needle"* ]]; then
    pass 1; echo "✓ $name: $(echo "$out" | head -1 | cut -c1-160)…"
  else
    echo "$out" >"$logs/check_${name// /_}.log"
    fail "$name: tp_flight exit $rc, first line '$(echo "$out" | head -1)', not '$needle'"
  fi
}
# flight_ranks NP: "ranks 0, 1, ..., NP-2" (or "rank 0"); flight_world NP: "0, 1, ..., NP-1".
flight_ranks() { if [ "$1" = 2 ]; then echo "rank 0"; else echo "ranks $(seq -s ', ' 0 $(($1 - 2)))"; fi; }
flight_world() { seq -s ', ' 0 $(($1 - 1)); }
host=$(hostname)

# 1. SIGSTOP of the last rank outside any collective (fail_one_rank stops it at step 3, before its
# third all-reduce): the watchdog has the others dump before it ends the job; the stopped rank
# cannot write one, but its ring file (observe/flight_recorder.h) shows it never entered #3.
d=$(flight_dir stop)
WITHIN=15 expect "flight: SIGSTOP of rank 2 of 3" nonzero "rank 2 (pid" 3 "$BUILD/bin/fail_one_rank" \
  --mode=sigstop --stall-timeout 2 --flight-dir "$d"
flight_check "flight: tp_flight after a SIGSTOP" "$d" \
  "rank 2 (host $host, step 3, no dump of its own: stopped or killed) never entered collective #3 all_reduce(4.0 KiB) on the world of world ranks 0, 1, 2; its last completed was #2; ranks 0, 1 wait in #3"

# 2. A rank that skips the all-reduce and computes on (no --check-collectives): the stall detector
# fires, every rank dumps (the skipping one too), tp_flight names the one that never entered.
for np in 2 4; do
  last=$((np - 1)) d=$(flight_dir never$np)
  WITHIN=15 expect "flight: np $np, a rank skips a collective" nonzero "error: no progress for" $np "$cm" \
    --mode=never --stall-timeout 2 --flight-dir "$d"
  flight_check "flight: tp_flight names the rank that skipped, np $np" "$d" \
    "rank $last (host $host, step 3) never entered collective #5 all_reduce(16.0 KiB, 'mlp fc2') on the world of world ranks $(flight_world $np); its last completed was #4; $(flight_ranks $np) wait"
done

# 3. Another count, and a skipped all-reduce, under --check-collectives: every rank dumps before
# it exits 2; tp_flight names the first call where the ranks disagree.
for np in 2 3; do
  last=$((np - 1)) full=$((4096 / np * np)) d=$(flight_dir size$np)
  expect "flight: np $np, a rank all-reduces another count" 2 "error: collective #5" $np "$cm" \
    --mode=size --check-collectives --flight-dir "$d"
  flight_check "flight: tp_flight names the count mismatch, np $np" "$d" \
    "collective #5 of the world of world ranks $(flight_world $np): $(flight_ranks $np) called all_reduce(4096 floats, 'mlp fc2'); rank $last called all_reduce(4104 floats, 'mlp fc2')"
  d=$(flight_dir skip$np)
  expect "flight: np $np, a rank skips a checked all-reduce" 2 "error: collective #5" $np "$cm" \
    --mode=skip --check-collectives --flight-dir "$d"
  flight_check "flight: tp_flight names the skipped all-reduce, np $np" "$d" \
    "collective #5 of the world of world ranks $(flight_world $np): $(flight_ranks $np) called all_reduce(4096 floats, 'mlp fc2'); rank $last called all_gather($full floats, 'attn qkv')"
done

# 4. SIGKILL of the last rank while the others wait in their all-reduce: nobody can write a dump
# in time (MPICH's launcher kills the others within ~0.1 s, before the watchdog's SIGUSR1 is
# served), but every rank's ring file holds what it did.
d=$(flight_dir kill)
WITHIN=15 expect "flight: SIGKILL of rank 2 of 3" nonzero "rank 2 (pid" 3 "$BUILD/bin/fail_one_rank" \
  --mode=sigkill --flight-dir "$d"
flight_check "flight: tp_flight after a SIGKILL ($(ls "$d" | grep -c jsonl) dumps, $(ls "$d" | grep -c ring) ring files)" "$d" \
  "rank 2 (host $host, step 3, no dump of its own: stopped or killed) never entered collective #3 all_reduce(4.0 KiB) on the world of world ranks 0, 1, 2; its last completed was #2; ranks 0, 1 wait in #3"

# 5. The escalation's timing (docs/performance.md): tp_train at np 2, rank 1 SIGSTOPped from
# outside at T0, --stall-timeout 3: the dumps, the watchdog's line and the job's end, each within
# 3 + 5 s of T0; tp_flight's line names rank 1.
name="flight: escalation, stall to dumps, line and end"
d=$(flight_dir escalate) log=$logs/check_${name// /_}.log
"$MPIEXEC" $MPI_FLAGS -np 2 "${train[@]}" --steps 100000000 --stall-timeout 3 --flight-dir "$d" \
  </dev/null >"$log" 2>&1 &
launcher=$!
if stall_wait_step "$log"; then
  victim=$(stall_ranks "$launcher" | tail -1)
  t0=$(date +%s.%N); kill -STOP "$victim"
  t_line=""
  for _ in $(seq 150); do
    [ -z "$t_line" ] && grep -q "no progress for" "$log" && t_line=$(date +%s.%N)
    kill -0 "$launcher" 2>/dev/null || break; sleep 0.1
  done
  t_end=$(date +%s.%N)
  # The line and the end within one poll: the line's time is the end's (an upper bound).
  [ -z "$t_line" ] && grep -q "no progress for" "$log" && t_line=$t_end
  kill -KILL "$victim" "$launcher" 2>/dev/null; wait "$launcher"
  t_dump=$(stat -c %.9Y "$d"/flight-rank-0.jsonl 2>/dev/null || echo 0)
  t_diag=$( { "$fl" "$d" | head -1; } 2>&1); t_tool=$(date +%s.%N)
  times=$(awk -v a="$t0" -v l="${t_line:-0}" -v e="$t_end" -v p="$t_dump" -v f="$t_tool" \
    'BEGIN { printf "dumps %.2f s, watchdog line %.2f s, job end %.2f s, tp_flight line %.2f s", p - a, l - a, e - a, f - a }')
  echo "$times" >>"$log"
  if [ -z "$t_line" ] || [ "$t_dump" = 0 ]; then fail "$name: no line or no dump (see $log)"
  elif ! awk -v a="$t0" -v e="$t_end" 'BEGIN { exit !(e - a <= 8) }'; then fail "$name: $times (over 3 + 5 s)"
  elif [[ "$t_diag" != *"rank 1 "*"stopped or killed"* ]]; then fail "$name: tp_flight says '$t_diag'"
  else pass 1; echo "✓ $name: $times after the SIGSTOP (--stall-timeout 3)"; fi
else
  fail "$name: tp_train did not start (see $log)"; kill -KILL "$launcher"; wait "$launcher"
fi

# 5b. A process grid (t = 2 x dp 2 at np 4): the groups are named by axis and world ranks, and
# of the ranks that lag some group the stopped one (only its ring file) is named, not rank 2,
# which merely waits for it in their TP group.
name="flight: t 2 x dp 2, rank 3 stopped"
d=$(flight_dir grid) log=$logs/check_${name// /_}.log
"$MPIEXEC" $MPI_FLAGS -np 4 "${train[@]}" --dp 2 --steps 100000000 --stall-timeout 2 --flight-dir "$d" \
  </dev/null >"$log" 2>&1 &
launcher=$!
if stall_wait_step "$log"; then
  kill -STOP "$(stall_ranks "$launcher" | tail -1)"
  for _ in $(seq 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$launcher" 2>/dev/null; wait "$launcher"
  out=$("$fl" "$d" 2>&1)
  if [[ "$(echo "$out" | head -1)" == "rank 3 (host $host, step "*", no dump of its own: stopped or killed)"* ]] &&
    echo "$out" | grep -q "^the TP group of world ranks 2, 3:" && echo "$out" | grep -q "^the DP group of world ranks 1, 3:"; then
    pass 1; echo "✓ $name: $(echo "$out" | head -1 | cut -c1-170)…"
  else echo "$out" >>"$log"; fail "$name: tp_flight does not name rank 3 or the groups (see $log)"; fi
else
  fail "$name: tp_train did not start (see $log)"; kill -KILL "$launcher"; wait "$launcher"
fi

# 6. SIGUSR1 to a rank: a live snapshot; the run goes on (still training a second later), and
# a normal end (here a graceful SIGTERM, exit 143) leaves no ring file behind.
name="flight: SIGUSR1 snapshot, the run goes on"
d=$(flight_dir live) log=$logs/check_${name// /_}.log
"$MPIEXEC" $MPI_FLAGS -np 2 "${train[@]}" --steps 100000000 --flight-dir "$d" </dev/null >"$log" 2>&1 &
launcher=$!
if stall_wait_step "$log"; then
  kill -USR1 "$(stall_ranks "$launcher" | head -1)"
  for _ in $(seq 50); do [ -s "$d/flight-rank-0.jsonl" ] && break; sleep 0.1; done
  sleep 1; alive=$(kill -0 "$launcher" 2>/dev/null && echo yes)
  kill -TERM "$launcher"; wait "$launcher"; rc=$?
  if [ "$alive" != yes ]; then fail "$name: the run ended after the snapshot (see $log)"
  elif ! grep -q '"reason":"SIGUSR1' "$d/flight-rank-0.jsonl" 2>/dev/null; then fail "$name: no snapshot of rank 0 in $d"
  elif [ -e "$d/flight-rank-1.jsonl" ]; then fail "$name: rank 1 dumped too (only rank 0 was asked)"
  elif [ -n "$(ls "$d"/*.ring 2>/dev/null)" ]; then fail "$name: ring files left after the run ended by itself (exit $rc)"
  else pass 1; echo "✓ $name: rank 0 wrote $(grep -c '"seq"' "$d/flight-rank-0.jsonl") records, the run went on (then SIGTERM: exit $rc)"; fi
else
  fail "$name: tp_train did not start (see $log)"; kill -KILL "$launcher"; wait "$launcher"
fi

# 6b. The non-finite stop (exit 3) dumps on every rank, into the folder of --save by default.
d=$(flight_dir nan)
WITHIN=20 expect "flight: the non-finite stop dumps" 3 "first non-finite tensor: " 2 "${train[@]}" \
  --lr 1e30 --steps 20 --save "$d/ck.safetensors"
if grep -q '"reason":"non-finite stop at step' "$d/flight-rank-0.jsonl" "$d/flight-rank-1.jsonl" 2>/dev/null &&
  [ "$(grep -l '"reason":"non-finite' "$d"/flight-rank-*.jsonl | wc -l)" = 2 ] && [ -z "$(ls "$d"/*.ring 2>/dev/null)" ]; then
  pass 1; echo "✓ flight: both ranks dumped at the non-finite stop, next to --save; no ring file left"
else fail "flight: no dump of both ranks at the non-finite stop in $d (or a ring file left)"; fi

# 6c. --flight-records 0: no recorder, no file; the stall is named as before, within the same time
# (the watchdog asks no rank for a dump, and a SIGUSR1 to a rank is ignored, not fatal).
d=$(flight_dir off)
WITHIN=10 expect "flight: --flight-records 0, a stall" nonzero "rank 2 (pid" 3 "$BUILD/bin/fail_one_rank" \
  --mode=sigstop --stall-timeout 2 --flight-records 0 --flight-dir "$d"
if [ -z "$(ls "$d")" ]; then pass 1; echo "✓ flight: --flight-records 0 writes nothing"
else fail "flight: --flight-records 0 wrote $(ls "$d" | head -3)"; fi

# 7. Bad inputs, one line each, exit 2.
expect "flight: --flight-dir that does not exist" 2 "the folder $tmp/flight_nope does not exist" 2 \
  "${train[@]}" --steps 1 --flight-dir "$tmp/flight_nope"
expect "flight: tp_flight on an empty folder" 2 "no flight-rank-*.jsonl in" 1 "$fl" "$(flight_dir empty)"
d=$(flight_dir mixed)
cp "$tmp/flight_never2/flight-rank-0.jsonl" "$tmp/flight_size2/flight-rank-1.jsonl" "$d/"
expect "flight: tp_flight on two jobs' dumps" 2 "come from two different jobs" 1 "$fl" "$d"
d=$(flight_dir cut)
head -c 300 "$tmp/flight_never2/flight-rank-0.jsonl" >"$d/flight-rank-0.jsonl"
expect "flight: tp_flight on a truncated dump" 2 "flight-rank-0.jsonl line" 1 "$fl" "$d"

# 8. The NCCL communicator on the CUDA emulator records through the same front: a count mismatch
# under --check-collectives and a skipped all-reduce that stalls, each named by tp_flight.
if [ -x "$BUILD/emu/bin/collective_mismatch" ]; then
  emu=("$BUILD/emu/bin/collective_mismatch" --backend gpu --comm nccl)
  d=$(flight_dir emu_size)
  WITHIN=30 expect "flight: emulated NCCL, another count" 2 "error: collective #5" 2 "${emu[@]}" \
    --mode=size --check-collectives --flight-dir "$d"
  flight_check "flight: tp_flight on emulated NCCL's mismatch" "$d" \
    "collective #5 of the world of world ranks 0, 1: rank 0 called all_reduce(4096 floats, 'mlp fc2'); rank 1 called all_reduce(4104 floats, 'mlp fc2')"
  d=$(flight_dir emu_never)
  WITHIN=30 expect "flight: emulated NCCL, a rank skips a collective" nonzero "error: no progress for" 2 \
    "${emu[@]}" --mode=never --stall-timeout 2 --flight-dir "$d"
  flight_check "flight: tp_flight on emulated NCCL's stall" "$d" \
    "rank 1 (host $host, step 3) never entered collective #5 all_reduce(16.0 KiB, 'mlp fc2') on the world of world ranks 0, 1; its last completed was #4; rank 0 waits in #5"
fi
