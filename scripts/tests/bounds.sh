# bounds.sh — issue 39's counts and floors (sourced by scripts/run-tests.sh, section 8b).
#
# Every count a flag takes has a bound in reason, stated in --help and refused beyond it in one
# line (no run for hours, no truncation to an int); a real flag below its smallest meaningful value
# is refused instead of meaning "off"; a given --peak-tflops whose MFU passes 100 % warns once;
# tp_preflight refuses what tp_train refuses, with the same words and defaults; tp_tokenize checks
# its writes and ends quietly on a closed pipe.

# 1. Counts: refused beyond their bound, in one line, within seconds (tp_train's --eval-batches,
# --keep, --warmup, --decay-steps, --save-every, --eval-every, --log-every: tests/train/test_train_flags.cpp).
expect "--keep 2^32+1 (not kept as 1)" 2 "--keep=4294967297: must be in [1, 1000]" 1 \
  "${tt[@]}" --save "$tmp/bounds/" --save-every 1 --keep 4294967297
expect "tp_tokenize --passes 2^32+1" 2 "--passes=4294967297: must be in [1, 1000]" 1 \
  "$BUILD/bin/tp_tokenize" --bench --passes 4294967297
expect "tp_generate --tokens 2^40" 2 "--tokens=1099511627776: must be <= 1048576" 1 \
  "$BUILD/bin/tp_generate" --load "$tmp/none.safetensors" --prompt TP --tokens 1099511627776
log=$logs/check_bounds_help.log
run_mpi 1 "$BUILD/bin/tp_train" --help >"$log" 2>&1
if grep -q -- '--keep=N .*(default: 3; in \[1, 1000\])' "$log" &&
   grep -q -- '--eval-batches=N .*(default: 4; in \[1, 10000\])' "$log" &&
   grep -q -- '--memory-budget=X .*(default: 0; 0 or >= 1)' "$log" &&
   grep -q -- '--stall-timeout=X .*(default: 60; 0 or >= 1)' "$log"; then
  pass 1; echo "✓ tp_train --help states the bounds of --keep, --eval-batches, --memory-budget, --stall-timeout"
else fail "tp_train --help lacks a bound of --keep, --eval-batches, --memory-budget or --stall-timeout (see $log)"; fi

# 2. Reals below their smallest meaningful value: refused, not "off" or a busy loop.
# (--memory-budget 1e-300 and --peak-tflops 1e-300: tests/train/test_train_flags.cpp; --stall-timeout is
# the launcher's.)
expect "--stall-timeout 0.001" 2 "--stall-timeout=0.001: must be 0 or >= 1" 1 "${tt[@]}" --stall-timeout 0.001

# 3. tp_preflight refuses what tp_train refuses, with the same words (one declaration of --pp,
# --schedule (lib/model/pipeline_plan.h), --cp and --cp-layout (lib/model/preflight_cp.h)) and the same defaults: --pp 2 plans tp_train's afab.
for pp in 0 -1; do
  expect "tp_preflight --pp $pp" 2 "error: --pp=$pp: must be in [1, 1024]" 1 "$BUILD/bin/tp_preflight" --pp "$pp"
done
# The flags both tools take: the same error line, word for word.
for args in "--pp 0" "--pp 2000" "--schedule gpipe" "--zero 2" "--zero -1" "--micro-batches 0" "--cp 0" "--cp-layout spiral" \
  "--micro-batches 4294967297"; do
  # shellcheck disable=SC2086  # each case is several words
  a=$("$BUILD/bin/tp_preflight" $args 2>&1 | grep error:)
  # shellcheck disable=SC2086
  b=$(run_mpi 2 "${tt[@]}" --dp 2 $args 2>&1 | grep error:)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then pass 1; echo "✓ $args: tp_preflight and tp_train say: $a"
  else fail "$args: tp_preflight says '$a', tp_train '$b'"; fi
done
expect "tp_preflight --model= (not the default model)" 2 "--model=: expected one of gpt2-small" 1 \
  "$BUILD/bin/tp_preflight" --model=
expect "tp_preflight --pp 2 on tp_train's defaults" 0 "# problems: 0" 1 "$BUILD/bin/tp_preflight" --pp 2
expect "tp_train --schedule wrong (the preflight's words)" 2 "--schedule=afb: expected one of afab, 1f1b" 1 \
  "${tt[@]}" --schedule afb

# 4. A given --peak-tflops below what the run reaches (10 MFLOP/s: any machine, however busy): MFU
# past 100 % warns once, naming the flag.
name="--peak-tflops below the machine's"
expect "$name" 0 "is below this machine's; give its real peak or leave --peak-tflops out" 1 \
  "${train[@]}" --steps 4 --log-every 1 --peak-tflops 1e-5
n=$(grep -c 'warning: MFU' "$logs/check_${name// /_}.log")
if [ "$n" = 1 ]; then pass 1; echo "✓ $name: one warning in 4 steps"
else fail "$name: $n warnings in 4 steps, not 1 (see $logs/check_${name// /_}.log)"; fi

# 5. tp_tokenize checks its writes and ends quietly on a closed pipe. A byte-level vocabulary with
# no merges (GPT-2's 256 byte tokens and <|endoftext|>) is all it needs.
btok=$tmp/bounds_tok
mkdir -p "$btok"
python3 - "$btok" <<'PY'
import json, sys
bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
alphabet = dict(zip(bs, bs))
alphabet.update({b: 256 + i for i, b in enumerate(b for b in range(256) if b not in bs)})
vocab = {chr(alphabet[b]): b for b in range(256)}
vocab["<|endoftext|>"] = 256
json.dump(vocab, open(sys.argv[1] + "/vocab.json", "w"))
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\n")
del vocab[chr(alphabet[ord("q")])]  # one byte token missing: <|endoftext|>'s id 256 is past the end
import os; os.makedirs(sys.argv[1] + "/nobyte", exist_ok=True)
json.dump(vocab, open(sys.argv[1] + "/nobyte/vocab.json", "w"))
open(sys.argv[1] + "/nobyte/merges.txt", "w").write("#version: 0.2\n")
PY
log=$logs/check_tp_tokenize_dev_full.log
"$BUILD/bin/tp_tokenize" --tokenizer "$btok" <README.md >/dev/full 2>"$log"
rc=$?
if [ $rc != 0 ] && [ "$(grep -c 'error:' "$log")" = 1 ] && grep -q 'cannot write stdout: No space left on device (ENOSPC)' "$log"; then
  pass 1; echo "✓ tp_tokenize > /dev/full: exit $rc, says: $(head -1 "$log")"
else fail "tp_tokenize > /dev/full: exit $rc, not one line naming ENOSPC (see $log)"; fi
log=$logs/check_tp_tokenize_closed_pipe.log
# (1 MB of text: its ids overflow the pipe's buffer, so a write meets the closed pipe.)
yes 'tensor parallelism from scratch' | head -c 1000000 >"$btok/input.txt"
"$BUILD/bin/tp_tokenize" --tokenizer "$btok" <"$btok/input.txt" 2>"$log" | head -1 >/dev/null
rc=${PIPESTATUS[0]}
sleep 2  # the watchdog's line would come after 0.3 s (later on a busy machine)
if [ "$rc" = 141 ] && [ ! -s "$log" ]; then pass 1; echo "✓ tp_tokenize | head -1: exit 141, nothing on stderr"
else fail "tp_tokenize | head -1: exit $rc (141 expected), stderr: $(head -1 "$log") (see $log)"; fi

# 6. A --tokenizer that is not a folder is named with its errno, not "has neither vocab.json".
ln -sfn bounds_loop "$tmp/bounds_loop"  # points at itself
expect "--tokenizer missing" 2 "tokenizer folder $tmp/bounds_none: No such file or directory (ENOENT)" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$tmp/bounds_none"
expect "--tokenizer a symlink loop" 2 "tokenizer folder $tmp/bounds_loop: Too many levels of symbolic links (ELOOP)" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$tmp/bounds_loop"
expect "--tokenizer a file" 2 "tokenizer folder $btok/vocab.json: Not a directory (ENOTDIR)" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$btok/vocab.json"
expect "a vocabulary without the byte q" 2 "nobyte/vocab.json has no token for the byte 113" 1 \
  "$BUILD/bin/tp_tokenize" --tokenizer "$btok/nobyte"
rm -f "$tmp/bounds_loop"

# 7. --predict at t = 1 with --pp 2 says what it does not cover, not "nothing to predict".
expect "--predict at t = 1 with --pp 2" 0 "predict: t = 1 has no tensor-parallel collective; --predict covers only those, not the stages' activation sends (--pp 2)" 2 \
  "${tt[@]}" --pp 2 --predict

# 8. Lesson 15's --svg where it cannot go: refused before the lesson runs.
expect "lesson 15 --svg into a missing folder" 2 "--svg $tmp/bounds_none/x_afab.svg: the folder $tmp/bounds_none does not exist" 4 \
  "$BUILD/bin/lesson_15_pipeline_parallel" --svg "$tmp/bounds_none/x_"

# 9. The other tools' counts: tp_bench's sizes, lesson 13's steps, tp_export's --heads.
expect "tp_bench --hidden 2^40" 2 "--hidden=1099511627776: must be in [1, 65536]" 1 "$BUILD/bin/tp_bench" --hidden 1099511627776
expect "lesson 13 --steps 2^40" 2 "--steps=1099511627776: must be in [2, 100000]" 4 \
  "$BUILD/bin/lesson_13_train_gpt" --steps 1099511627776
expect "tp_export --heads -3" 2 "--heads=-3: must be >= 0" 1 "$BUILD/bin/tp_export" --load "$tmp/none.safetensors" --hf "$tmp/bounds_hf" --heads -3

# 10. A SIGTERM during a long evaluation (10000 held-out batches, minutes here) stops the run within
# seconds: the ranks agree on the signal after each held-out batch, not only at step boundaries.
ev=$tmp/bounds_eval
mkdir -p "$ev"
log=$logs/check_sigterm_during_evaluation.log
"$MPIEXEC" $MPI_FLAGS -np 2 "$BUILD/bin/tp_train" --steps 3 --log-every 1 --eval-every 1 --eval-batches 10000 \
  --save "$ev/" >"$log" 2>&1 </dev/null &
job=$!
for _ in $(seq 1 150); do grep -q '^step  *1 ' "$log" && break; sleep 0.2; done
sleep 1  # inside the evaluation of step 1
SECONDS=0
kill -TERM "$job"
( sleep 30; kill -TERM "$job"; sleep 5; kill -KILL "$job" ) 2>/dev/null &  # a second TERM kills
guard=$!
wait "$job"
rc=$?
kill "$guard" 2>/dev/null; wait "$guard" 2>/dev/null
# (MPICH's mpiexec, itself the one signalled, sometimes returns 0 though every rank exits 143: the
# line is what tells, as in savefail.sh.)
bounds_mpich=no; "$MPIEXEC" --version 2>&1 | grep -q HYDRA && bounds_mpich=yes
if { [ "$rc" = 143 ] || { [ "$rc" = 0 ] && [ "$bounds_mpich" = yes ]; }; } && [ "$SECONDS" -le 10 ] &&
   grep -q 'stopped by SIGTERM before step 2' "$log"; then
  pass 1; echo "✓ SIGTERM during a 10000-batch evaluation: exit 143 after ${SECONDS}s"
else fail "SIGTERM during a 10000-batch evaluation: exit $rc after ${SECONDS}s (at most 10 s and 143 expected; see $log)"; fi
rm -rf "$ev"
