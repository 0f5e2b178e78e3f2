# stall_deaths.sh — when a rank is killed, the watchdog names that rank, not a bystander the
# launcher killed after it (launcher/life_line.h). Sourced by scripts/run-tests.sh (pass, fail,
# stall_ranks, stall_wait_step, $logs, $BUILD in scope).
#
# Each rank of np 4 in turn is SIGKILLed a few steps into tp_train, at tp 4 and at tp 2 × pp 2:
# the first "ended before the job finished" line must name it, every time (8 kills; before the
# life lines 6 of 16 such kills were named right on 2 busy cores).
deaths_right=0 deaths_wrong=() deaths_silent=()
for grid in "" "--pp 2"; do
  for victim in 0 1 2 3; do
    log=$logs/death_np4_${grid:+pp2_}rank$victim.log
    # shellcheck disable=SC2086  # $grid is empty or two words
    "$MPIEXEC" $MPI_FLAGS -np 4 "$BUILD/bin/tp_train" --steps 1000000 --log-every 1 --hidden 48 \
      --heads 12 --seq 16 --batch 4 $grid </dev/null >"$log" 2>&1 &
    job=$!
    stall_wait_step "$log"
    pids=""  # all four ranks listed (on a busy machine one may not be readable at first)
    for _ in $(seq 50); do
      pids=$(stall_ranks "$job")
      [ "$(echo "$pids" | grep -c .)" = 4 ] && break
      sleep 0.1
    done
    pid=$(echo "$pids" | sed -n "$((victim + 1))p")
    [ -n "$pid" ] && kill -9 "$pid"
    for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$job" 2>/dev/null
    wait "$job" 2>/dev/null
    first=$(grep -m1 "ended before the job finished" "$log")
    case "$first" in
      "rank $victim (pid $pid, "*) deaths_right=$((deaths_right + 1)) ;;
      "") deaths_silent+=("rank $victim ${grid:-tp 4} ($log)") ;;
      *) deaths_wrong+=("rank $victim (pid ${pid:-none}) ${grid:-tp 4}: $first ($log)") ;;
    esac
  done
done
# A blamed bystander is a failure every time. A kill with no line at all (the watchdog's line did
# not reach the log: seen about once in 16 kills on a loaded 2-core machine, before the life lines
# too) is a separate fault: one is tolerated and named, two fail.
if [ ${#deaths_wrong[@]} = 0 ] && [ ${#deaths_silent[@]} -le 1 ]; then
  pass 1; echo "✓ SIGKILL of each rank of np 4 at tp 4 and tp 2 × pp 2: the killed rank named $deaths_right of 8 times, a bystander never${deaths_silent[0]:+ (no line for ${deaths_silent[0]})}"
else
  for w in "${deaths_wrong[@]}"; do fail "SIGKILL of $w"; done
  [ ${#deaths_silent[@]} -gt 1 ] && fail "SIGKILL: no watchdog line for ${#deaths_silent[@]} of 8 kills: ${deaths_silent[*]}"
fi
