# resume.sh — issue 24's periodic checkpoints on tp_train: --save-every, --keep, --resume auto
# (sourced by scripts/run-tests.sh, section 8b).
#
# 1. Bad input: one line each, exit 2. 2. A run SIGKILLed (kill -9 of its ranks) after a periodic
# checkpoint appeared resumes with --resume auto from the newest one, and its losses from there are
# the uninterrupted run's bit for bit (the same t, the CPU: the same sums in the same order); at
# another t within same_curve's 1e-4. 3. A newest file with a flipped byte is named and skipped.
# 4. --zero 1. 5. SIGTERM's emergency checkpoint.
# 6. The same command finishes the same run. With --resume, --steps is the step the run ends at, so
# the command that started it, given again after a crash, ends where the uninterrupted run ends,
# with its LR schedule (warm-up and cosine decay by absolute step); its --log-json is cut back to
# the checkpoint first, so each step is in it once. The crash is simulated: the run stopped after
# step 8's checkpoint, having logged steps 9, 10 and half of 11 (its last write cut short).

rs=$tmp/resume
rm -rf "$rs"; mkdir -p "$rs/empty" "$rs/ck"

# 1. Bad input.
expect "--resume auto on an empty folder" 2 "--resume auto: no checkpoint in $rs/empty" 2 \
  "${tt[@]}" --save "$rs/empty/" --resume auto
expect "--resume auto without --save" 2 "--resume auto looks for checkpoints where --save writes them" 2 \
  "${tt[@]}" --resume auto
expect "--resume with an unknown mode" 2 "--resume=latest: use auto" 2 "${tt[@]}" --save "$rs/empty/" --resume latest
expect "--save-every without --save" 2 "--save-every 5 needs --save" 2 "${tt[@]}" --save-every 5
expect "--resume auto with --load" 2 "give --resume auto or --load/--init-from, not both" 2 \
  "${tt[@]}" --save "$rs/empty/" --resume auto --load "$rs/x.safetensors"
expect "--resume auto-or-fresh on an empty folder" 0 "--resume: auto-or-fresh: no checkpoint of $rs/empty/ yet; starting fresh" 2 \
  "${tt[@]}" --save "$rs/empty/" --resume auto-or-fresh
rm -rf "$rs/empty"

# 2. A run killed after its step-20 checkpoint appeared (it would run for ever: it is killed at
#    whatever step it has reached), then the uninterrupted run to 10 steps past its newest file.
run_mpi 2 "${train[@]}" --steps 1000000 --save "$rs/ck/" --save-every 5 --keep 3 >"$logs/resume_killed.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ -e "$rs/ck/checkpoint-step000020.safetensors" ] && break; sleep 0.05; done
ranks=$(for p in $(descendants "$job"); do [ "$(ps -o comm= -p "$p")" = tp_train ] && echo "$p"; done)
# shellcheck disable=SC2086  # one pid per word
if [ -n "$ranks" ]; then kill -9 $ranks 2>/dev/null; fi
wait "$job"; rc=$?
newest=$(ls "$rs/ck" | grep -c '^checkpoint-step.*\.safetensors$')
# At most --keep + 1: a save writes the new file before it removes the oldest (so that --keep valid
# files exist at every moment), and a kill between the two leaves one more (seen under Open MPI).
if [ -n "$ranks" ] && [ "$rc" != 0 ] && [ "$newest" -ge 1 ] && [ "$newest" -le 4 ]; then
  pass 1; echo "✓ a run killed with kill -9 after step 20's checkpoint (exit $rc) left $newest checkpoints (--keep 3, + 1 if killed between a save and its prune)"
else fail "the run to kill: ranks '$ranks', exit $rc, $newest checkpoints (see $logs/resume_killed.log)"; fi
cp -r "$rs/ck" "$rs/ck_t1"; cp -r "$rs/ck" "$rs/ck_bad"
start=$(ls "$rs/ck" | sed -n 's/^checkpoint-step0*\([0-9][0-9]*\)\.safetensors$/\1/p' | sort -n | tail -1)
run_mpi 2 "${train[@]}" --steps $((${start:-0} + 10)) --log-json "$rs/ref.json" >"$logs/resume_ref.log" 2>&1 ||
  fail "tp_train --steps $((${start:-0} + 10)) exited non-zero (see $logs/resume_ref.log)"
# (With --resume, --steps is the step the run ends at: 10 past the checkpoint.)
run_mpi 2 "${train[@]}" --steps $((${start:-0} + 10)) --save "$rs/ck/" --save-every 5 --resume auto --log-json "$rs/res.json" \
  >"$logs/resume_auto.log" 2>&1 || fail "tp_train --resume auto exited non-zero (see $logs/resume_auto.log)"
if grep -q "loaded $rs/ck/checkpoint-step0*$start.safetensors at step $start (with optimizer state)" "$logs/resume_auto.log"; then
  pass 1; echo "✓ --resume auto took the newest checkpoint, step $start"
else fail "--resume auto did not load step ${start:-?} (see $logs/resume_auto.log)"; fi
same_bits "resumed with --resume auto at step $start, t = 2" "$rs/ref.json" "$rs/res.json" "$start"
run_mpi 1 "${train[@]}" --steps $((${start:-0} + 10)) --save "$rs/ck_t1/" --resume auto --log-json "$rs/res_t1.json" \
  >"$logs/resume_auto_t1.log" 2>&1 || fail "tp_train --resume auto at t = 1 exited non-zero (see $logs/resume_auto_t1.log)"
same_curve "the t = 2 run's checkpoint resumed with --resume auto at t = 1" "$rs/ref.json" "$rs/res_t1.json" "$start"

# 3. The newest file with one byte flipped in its last tensor: named, skipped, the one before taken.
bad=$(ls "$rs/ck_bad"/checkpoint-step*.safetensors | sort | tail -1)
prev=$(ls "$rs/ck_bad"/checkpoint-step*.safetensors | sort | tail -2 | head -1)
size=$(stat -c %s "$bad")
byte=$(od -An -tu1 -j $((size - 3)) -N1 "$bad" | tr -d ' ')
# shellcheck disable=SC2059  # the format is the octal escape of the flipped byte
printf "\\$(printf %03o $((byte ^ 64)))" | dd of="$bad" bs=1 seek=$((size - 3)) conv=notrunc status=none
prev_step=$(basename "$prev" | sed 's/^checkpoint-step0*\([0-9][0-9]*\)\.safetensors$/\1/')
run_mpi 2 "${train[@]}" --steps $((prev_step + 5)) --save "$rs/ck_bad/" --resume auto --log-json "$rs/res_bad.json" \
  >"$logs/resume_bad.log" 2>&1 || fail "tp_train --resume auto past a corrupt file exited non-zero (see $logs/resume_bad.log)"
if [ "$bad" != "$prev" ] && grep -q "^--resume: skipped $bad: .*fails its checksum" "$logs/resume_bad.log" &&
   grep -q "loaded $prev at step $prev_step" "$logs/resume_bad.log"; then
  pass 1; echo "✓ a corrupt newest checkpoint is named and skipped: $(grep -o '^--resume: skipped.*' "$logs/resume_bad.log" | cut -c1-150)"
else fail "a corrupt newest checkpoint ($bad) was not named and skipped for $prev (see $logs/resume_bad.log)"; fi
same_bits "resumed past a corrupt checkpoint at step $prev_step" "$rs/ref.json" "$rs/res_bad.json" "$prev_step"

# 4. --dp 2 --zero 1: a periodic save gathers AdamW's moments and training goes on sharded; the
#    resumed run continues the uninterrupted one bit for bit (tp 2 × dp 2 both times).
run_mpi 4 "${train[@]}" --steps 8 --dp 2 --zero 1 --log-json "$rs/zero_ref.json" >"$logs/resume_zero_ref.log" 2>&1 ||
  fail "tp_train --dp 2 --zero 1 exited non-zero (see $logs/resume_zero_ref.log)"
run_mpi 4 "${train[@]}" --steps 4 --dp 2 --zero 1 --save "$rs/zero/" --save-every 2 --log-json "$rs/zero_a.json" \
  >"$logs/resume_zero_a.log" 2>&1 || fail "tp_train --dp 2 --zero 1 --save-every 2 exited non-zero (see $logs/resume_zero_a.log)"
same_bits "--zero 1 with --save-every 2: steps 1..4" "$rs/zero_ref.json" "$rs/zero_a.json" 0
run_mpi 4 "${train[@]}" --steps 8 --dp 2 --zero 1 --save "$rs/zero/" --save-every 2 --resume auto \
  --log-json "$rs/zero_b.json" >"$logs/resume_zero_b.log" 2>&1 ||
  fail "tp_train --dp 2 --zero 1 --resume auto exited non-zero (see $logs/resume_zero_b.log)"
same_bits "--zero 1 resumed with --resume auto at step 4" "$rs/zero_ref.json" "$rs/zero_b.json" 4

# 5. SIGTERM with --save DIR/: the emergency checkpoint is the series' file of its step, and
#    --resume auto takes it.
"$MPIEXEC" $MPI_FLAGS -np 2 "${train[@]}" --steps 1000000 --log-every 1 --save "$rs/term/" --save-every 1000 \
  </dev/null >"$logs/resume_sigterm.log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 100); do grep -q "^step " "$logs/resume_sigterm.log" && break; sleep 0.2; done
kill -TERM "$mpirun_pid"
wait "$mpirun_pid"
term_step=$(sed -n 's/.*emergency checkpoint .*-step0*\([0-9][0-9]*\)\.safetensors saved at step.*/\1/p' "$logs/resume_sigterm.log" | head -1)
if [ -n "$term_step" ] && grep -q "or --resume auto)" "$logs/resume_sigterm.log" &&
   run_mpi 1 "${train[@]}" --steps $((term_step + 1)) --save "$rs/term/" --resume auto >"$logs/resume_after_term.log" 2>&1 &&
   grep -q "loaded $rs/term/checkpoint-step0*$term_step.safetensors at step $term_step" "$logs/resume_after_term.log"; then
  pass 1; echo "✓ SIGTERM with --save DIR/: $(grep -o 'emergency checkpoint.*' "$logs/resume_sigterm.log" | head -1); --resume auto takes it"
else fail "SIGTERM with --save DIR/: no series emergency checkpoint, or --resume auto did not take it (see $logs/resume_sigterm.log, $logs/resume_after_term.log)"; fi

# 6. The same command finishes the same run (see the top).
same=("${train[@]}" --warmup 2 --decay-steps 12 --save "$rs/same/" --save-every 4 --resume auto-or-fresh --log-json "$rs/same.json")
run_mpi 2 "${train[@]}" --warmup 2 --decay-steps 12 --steps 12 --log-json "$rs/same_ref.json" >"$logs/resume_same_ref.log" 2>&1 ||
  fail "tp_train --steps 12 (the uninterrupted run) exited non-zero (see $logs/resume_same_ref.log)"
run_mpi 2 "${same[@]}" --steps 8 >"$logs/resume_same_a.log" 2>&1 || fail "tp_train --steps 8 exited non-zero (see $logs/resume_same_a.log)"
printf '{"step": 9, "loss": 9}\n{"step": 10, "loss": 9}\n{"step": 11, "lo' >>"$rs/same.json"
run_mpi 2 "${same[@]}" --steps 12 >"$logs/resume_same_b.log" 2>&1 || fail "tp_train --steps 12 --resume auto-or-fresh exited non-zero (see $logs/resume_same_b.log)"
if grep -q "^--resume: --steps 12 is the step the run ends at: 4 more from step 8" "$logs/resume_same_b.log" &&
   grep -q "cut 3 lines past step 8" "$logs/resume_same_b.log" &&
   [ "$(sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$rs/same.json" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 10 11 12 " ]; then
  pass 1; echo "✓ the same command after a crash at step 8 ends at step 12, its --log-json each step once: $(grep -o -- '--log-json .*: cut.*' "$logs/resume_same_b.log" | cut -c1-120)"
else fail "the same command after a crash did not end at step 12 with one line per step (see $logs/resume_same_b.log, $rs/same.json)"; fi
tail -n +9 "$rs/same.json" >"$rs/same_resumed.json"
same_bits "the same command resumed at step 8 (warm-up and cosine decay)" "$rs/same_ref.json" "$rs/same_resumed.json" 8
before=$(ls "$rs/same" | tr '\n' ' ')
run_mpi 2 "${same[@]}" --steps 12 >"$logs/resume_same_c.log" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -q "^--resume: the run is at step 12 and --steps 12 ends it there: nothing left to train" "$logs/resume_same_c.log" &&
   [ "$(ls "$rs/same" | tr '\n' ' ')" = "$before" ] && [ "$(wc -l <"$rs/same.json")" = 12 ]; then
  pass 1; echo "✓ the same command once more after the run ended: exit 0, nothing trained, nothing written"
else fail "the same command after the run ended: exit $rc (see $logs/resume_same_c.log)"; fi
