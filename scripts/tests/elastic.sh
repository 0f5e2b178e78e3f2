# shellcheck shell=bash disable=SC2154  # sourced by run-tests.sh, which sets $tmp, $logs, $BUILD
# elastic.sh — scripts/tp-run, the elastic supervisor (issue 44, item 4), on MPICH's two-host
# rehearsal (scripts/tests/nodes.sh): tp 2 × dp 2 over localhost:2,127.0.0.1:2 with --save-every,
# rank 3 (on the second host) SIGKILLed after the step-20 checkpoint:
#   - tp-run restarts once, on localhost:2 alone: np 2, dp 1, --micro-batches 2, from the newest
#     checkpoint, in one line naming the rank, its host and the step; the same command ends at the
#     same final step, every step logged once;
#   - the losses after the restart are, bit for bit, those of an uninterrupted tp 2 × dp 1 run
#     with --micro-batches 2 resumed from a copy of that checkpoint, and so is the final checkpoint
#     (with --micro-batches 1 the sums run in another order: 42 of 170 losses differed, measured);
#   - no checkpoint lost: every --save-every file is there, those before the failure unchanged;
#   - a second failure past --max-restarts 1, and one below --min-dp 2: one "tp-run: error:" line
#     each, exit non-zero, no restart; SIGTERM to tp-run: the emergency checkpoint, no restart;
#   - bad input to tp-run: one line, exit 2.
# Sourced by run-tests.sh (section 8b). Open MPI cannot rehearse two hosts: skipped with one line.
if ! "$MPIEXEC" --version 2>&1 | grep -q HYDRA; then
  echo "elastic supervisor skipped: $MPIEXEC is not MPICH's hydra (the two-host rehearsal needs it; see nodes.sh)"
  skipped=$((skipped + 1))
else
  el=$tmp/elastic
  rm -rf "$el"; mkdir -p "$el"
  sup=(timeout 120 scripts/tp-run --mpirun "$MPIEXEC" --launcher fork --hosts localhost:2,127.0.0.1:2)
  # el_rank PARENT RANK: the pid of rank RANK of the mpirun tp-run runs now (under PARENT).
  el_rank() {
    local p
    for p in $(descendants "$1"); do
      case "$(ps -o comm= -p "$p")" in
        mpiexec* | mpirun*) stall_ranks "$p" | sed -n "$(($2 + 1))p"; return ;;
      esac
    done
  }
  # el_wait COMMAND...: until COMMAND succeeds (at most 30 s; status 1 then).
  el_wait() { for _ in $(seq 300); do "$@" && return 0; sleep 0.1; done; return 1; }
  # el_kill PARENT RANK: SIGKILLs that rank once it runs; prints its pid.
  el_kill() {
    local pid
    for _ in $(seq 300); do
      pid=$(el_rank "$1" "$2")
      if [ -n "$pid" ]; then kill -KILL "$pid" && echo "$pid"; return; fi
      sleep 0.1
    done
  }
  ck_sums() { (cd "$el/ck" && cksum checkpoint-step*.safetensors 2>/dev/null); }

  # 1. The supervised run: rank 3 killed after the step-20 checkpoint, a restart on the first host.
  log=$logs/elastic_restart.log
  "${sup[@]}" --max-restarts 2 -- "${train[@]}" --dp 2 --steps 200 --save "$el/ck/" --save-every 10 --keep 100 \
    --log-json "$el/sup.json" >"$log" 2>&1 &
  job=$!
  el_wait test -e "$el/ck/checkpoint-step000020.safetensors"
  victim=$(el_kill "$job" 3)
  before=$(ck_sums)
  wait "$job"; rc=$?
  line=$(grep '^tp-run: restart' "$log")
  from=$(echo "$line" | sed -n 's/.*resuming from step \([0-9]*\) .*/\1/p')
  want="^tp-run: restart 1 of at most 2: rank 3 (pid $victim, host [^)]*) ended before the job finished (killed or crashed) at step [0-9]* (exit [0-9]*; its host in --hosts: 127.0.0.1); resuming from step $from (checkpoint-step0*$from.safetensors) on localhost:2: np 4 → 2, dp 2 → 1, --micro-batches 1 → 2"
  if [ "$rc" = 0 ] && [ -n "$victim" ] && [ -n "$from" ] && [ "$(echo "$line" | wc -l)" = 1 ] && echo "$line" | grep -q "$want" &&
     grep -q "^loaded $el/ck/checkpoint-step0*$from.safetensors at step $from (with optimizer state)" "$log"; then
    pass 1; echo "✓ elastic: rank 3 SIGKILLed on the second host; one restart, exit 0: ${line#tp-run: }"
  else fail "elastic: after SIGKILL of rank 3 (pid '$victim'): exit $rc, no or a wrong restart line (see $log)"; fi
  if [ "$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$el/sup.json" | tr '\n' ' ')" = "$(seq -s ' ' 200) " ]; then
    pass 1; echo "✓ elastic: the same command ended at step 200, each of steps 1..200 logged once"
  else fail "elastic: --log-json $el/sup.json does not hold steps 1..200 once each"; fi
  # No checkpoint lost: every tenth step's file, those written before the failure unchanged.
  lost=$(for s in $(seq 10 10 200); do [ -s "$el/ck/checkpoint-step$(printf %06d "$s").safetensors" ] || echo "$s"; done)
  changed=$(LC_ALL=C comm -23 <(echo "$before" | LC_ALL=C sort) <(ck_sums | LC_ALL=C sort))
  if [ -z "$lost" ] && [ -z "$changed" ] && [ -n "$before" ]; then
    pass 1; echo "✓ elastic: no checkpoint lost: the 20 files of steps 10..200, the $(echo "$before" | wc -l) written before the failure unchanged"
  else fail "elastic: checkpoints of steps '$(echo $lost)' missing, '$(echo $changed)' changed (see $el/ck)"; fi
  # The reference: tp 2 × dp 1, --micro-batches 2, resumed from a copy of the same checkpoint.
  if [ -n "$from" ]; then
    mkdir -p "$el/ref"
    cp "$el/ck/checkpoint-step$(printf %06d "$from").safetensors" "$el/ref/"
    run_mpi 2 "${train[@]}" --micro-batches 2 --steps 200 --save "$el/ref/" --save-every 10 --keep 100 --resume auto \
      --log-json "$el/ref.json" >"$logs/elastic_ref.log" 2>&1 || fail "elastic: the reference run exited non-zero (see $logs/elastic_ref.log)"
    head -n "$from" "$el/sup.json" | cat - "$el/ref.json" >"$el/ref_full.json"
    tail -n +$((from + 1)) "$el/sup.json" >"$el/sup_after.json"
    same_bits "elastic: after the restart, against tp 2 × dp 1 × 2 micro-batches resumed at step $from" "$el/ref_full.json" \
      "$el/sup_after.json" "$from"
    if cmp -s "$el/ck/checkpoint-step000200.safetensors" "$el/ref/checkpoint-step000200.safetensors"; then
      pass 1; echo "✓ elastic: the final checkpoint (step 200) is the reference run's, byte for byte"
    else fail "elastic: the final checkpoint differs from the reference run's ($el/ck, $el/ref)"; fi
  fi

  # 2. A second failure past --max-restarts 1 (rank 1, on the first host, after the restart).
  log=$logs/elastic_max_restarts.log
  "${sup[@]}" --max-restarts 1 -- "${train[@]}" --dp 2 --steps 1000000 --save "$el/mr/" --save-every 10 >"$log" 2>&1 &
  job=$!
  el_wait test -e "$el/mr/checkpoint-step000020.safetensors"
  el_kill "$job" 3 >/dev/null
  el_wait grep -q '^loaded ' "$log"
  victim=$(el_kill "$job" 1)
  SECONDS=0
  wait "$job"; rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$SECONDS" -le 15 ] && [ "$(grep -c '^tp-run: restart' "$log")" = 1 ] &&
     [ "$(grep -c 'tp-run: error:' "$log")" = 1 ] &&
     grep -q "^tp-run: error: rank 1 (pid $victim, .*; not restarting: --max-restarts 1 reached (the newest checkpoint is step [0-9]*" "$log"; then
    pass 1; echo "✓ elastic: a second failure past --max-restarts 1: exit $rc, $(grep -o 'not restarting.*' "$log" | cut -c1-110)"
  else fail "elastic: a second failure past --max-restarts 1: exit $rc after ${SECONDS}s, not one 'tp-run: error:' line (see $log)"; fi

  # 3. --min-dp 2: the one replica left is below the floor.
  log=$logs/elastic_min_dp.log
  "${sup[@]}" --min-dp 2 -- "${train[@]}" --dp 2 --steps 1000000 --log-every 1 --save "$el/md/" --save-every 10 >"$log" 2>&1 &
  job=$!
  stall_wait_step "$log"
  el_kill "$job" 3 >/dev/null
  wait "$job"; rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && ! grep -q '^tp-run: restart' "$log" &&
     grep -q "^tp-run: error: rank 3 .*; not restarting: the 2 slots left (localhost:2) hold dp 1 at 2 model-parallel ranks, below --min-dp 2" "$log"; then
    pass 1; echo "✓ elastic: --min-dp 2 with one replica left: exit $rc, $(grep -o 'not restarting.*' "$log" | cut -c1-100)"
  else fail "elastic: --min-dp 2: exit $rc, no refusal line or a restart (see $log)"; fi

  # 4. SIGTERM to tp-run: forwarded; tp_train's emergency checkpoint, no restart. On one host:
  #    on the two, a rank of the second host once ended before the step boundary (UCX aborted on
  #    it; 1 of 4 runs under tp-run, then 0 of 8 under tp-run and 0 of 8 under plain mpirun; open).
  log=$logs/elastic_sigterm.log
  timeout 120 scripts/tp-run --mpirun "$MPIEXEC" --np 2 -- "${train[@]}" --steps 1000000 --log-every 1 \
    --save "$el/term/" --save-every 1000 >"$log" 2>&1 &
  job=$!
  stall_wait_step "$log"
  kill -TERM "$job"
  wait "$job"; rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && ! grep -q '^tp-run: restart' "$log" && grep -q "emergency checkpoint .* saved at step" "$log" &&
     ls "$el/term" | grep -q '^checkpoint-step.*\.safetensors$'; then
    pass 1; echo "✓ elastic: SIGTERM to tp-run: exit $rc, no restart, $(grep -o 'emergency checkpoint.*saved at step [0-9]*' "$log" | head -1)"
  else fail "elastic: SIGTERM to tp-run: exit $rc, a restart or no emergency checkpoint (see $log)"; fi

  # 5. The grid rule beyond this test bed's one case (tp-run's own functions, no MPI): dp 4 on 6
  #    slots of tp 2 takes dp 2 (3 does not divide the 4 micro-batches of a step), dp 4 with 3
  #    micro-batches takes dp 3 × 4; --min-dp 3 refuses dp 2; ranks by MPICH's block placement.
  if python3 - >"$logs/elastic_grid.log" 2>&1 <<'PY'; then
import importlib.machinery, types
loader = importlib.machinery.SourceFileLoader("tp_run", "scripts/tp-run")
run = types.ModuleType(loader.name)
loader.exec_module(run)
G, H = run.Grid, run.Host
assert run.shrink(G(8, 4, 1, ""), 6, "", 1) == G(4, 2, 2, "")
assert run.shrink(G(8, 4, 3, ""), 6, "", 1) == G(6, 3, 4, "")
assert run.shrink(G(8, 4, 1, ""), 6, "", 3) is None
assert run.shrink(G(4, 2, 1, ""), 2, "1", 1) == G(2, 1, 2, "0")  # one replica: --zero 0
hosts = [H("a", 2), H("b", 2), H("c", 1)]
assert [run.host_of_rank(hosts, 5, r).name for r in range(5)] == ["a", "a", "b", "b", "c"]
assert run.with_flag(["--dp=2", "--steps", "9"], "dp", "1") == ["--dp=1", "--steps", "9"]
assert run.with_flag(["--steps", "9"], "micro-batches", "2") == ["--steps", "9", "--micro-batches", "2"]
PY
    pass 1; echo "✓ elastic: the grid rule (dp 4 on 6 slots: 2 × 2 or 3 × 4 micro-batches; --min-dp; --zero 0) and MPICH's placement"
  else fail "elastic: the grid rule or the placement differs (see $logs/elastic_grid.log)"; cat "$logs/elastic_grid.log"; fi

  # 6. Bad input to tp-run: one line, exit 2, nothing started.
  el_bad() {  # el_bad NAME NEEDLE ARGS...
    local name=$1 needle=$2 log=$logs/elastic_bad_${1// /_}.log rc; shift 2
    timeout 60 scripts/tp-run "$@" >"$log" 2>&1; rc=$?
    if [ "$rc" = 2 ] && [ "$(wc -l <"$log")" = 1 ] && grep -qF -- "$needle" "$log"; then
      pass 1; echo "✓ elastic: $name: exit 2, says: $(cat "$log")"
    else fail "elastic: $name: exit $rc, expected 2 and one line with '$needle' (see $log)"; fi
  }
  el_bad "--max-restarts -1" "tp-run: error: --max-restarts -1: expected how many times to restart (0: never), an integer >= 0" \
    --max-restarts -1 --np 2 -- "${train[@]}" --save "$el/bad/"
  el_bad "--min-dp above --dp" "tp-run: error: --min-dp 2 is above the run's own --dp 1" \
    --min-dp 2 --np 2 -- "${train[@]}" --save "$el/bad/"
  el_bad "no --save" "tp-run: error: the program has no --save" --np 2 -- "${train[@]}"
  [ ! -e "$el/bad" ] || fail "elastic: bad input to tp-run created $el/bad"
fi
