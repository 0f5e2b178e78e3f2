# flags.sh — issue 19's flags and output writes (sourced by scripts/run-tests.sh, section 8b).
#
# Flags: an empty path is refused, not taken as "no file"; integers are checked in the type they
# are stored in, reals as the float they become; --link, --decay-steps and lesson flags have the
# bounds their help states; sizes no machine holds are refused in flag terms, before anything wraps.
# Writes: every write of --log-json, --plot, --trace and --export-hf is checked, and a failure is
# one line with errno's name at the moment it happens (before the first step for --plot/--trace).
# Each case: exit code, the message, at most one "error:" line, within 10 s, no file changed.

# 1. An empty value for a path flag (an unset $CKPT) is an error, on every tool (tp_train's other
# path flags: tests/train/test_train_flags.cpp).
expect "--save= is empty" 2 "error: --save= is empty (an unset variable?); give a path, or leave --save out" 2 \
  "${tt[@]}" "--save="
expect "tp_generate --load=" 2 "--load= is empty" 1 "$BUILD/bin/tp_generate" --load= --prompt "TP"
expect "tp_export --hf=" 2 "--hf= is empty" 1 "$BUILD/bin/tp_export" --load "$tmp/ck.safetensors" --hf=
expect "lesson 13 --plot=" 2 "--plot= is empty" 4 "$BUILD/bin/lesson_13_train_gpt" --plot=

# 2. Integers in the type they are stored in: no cast after the check (tp_train's: in
# tests/train/test_train_flags.cpp).
expect "tp_preflight --tp 4294967297" 2 "--tp=4294967297: out of range of the 32-bit int" 1 "$BUILD/bin/tp_preflight" --tp 4294967297
expect "tp_preflight -t 4294967297" 2 "--tp=4294967297: out of range" 1 "$BUILD/bin/tp_preflight" -t 4294967297
expect "tp_preflight --nodes 4294967297" 2 "--nodes=4294967297: out of range" 1 "$BUILD/bin/tp_preflight" --nodes 4294967297
expect "tp_preflight --gpus-per-node 4294967304" 2 "--gpus-per-node=4294967304: out of range" 1 \
  "$BUILD/bin/tp_preflight" --gpus-per-node 4294967304

# 3. Reals as the float they become, shown as typed (tp_train's: tests/train/test_train_flags.cpp).
expect "tp_generate --temperature 1e-50" 2 "--temperature=1e-50: is 0 as a 32-bit float" 1 \
  "$BUILD/bin/tp_generate" --load "$tmp/ck.safetensors" --prompt "TP" --temperature 1e-50

# 4. --link: bounds that keep a run finite, said in the message (tp_train and a lesson).
expect "--link 1e9,1 (α = 1000 s)" 2 "--link=1e9,1: α = 1e9 µs is more than the 10000 µs" 2 "${tt[@]}" --link 1e9,1
expect "lesson 07 --link 1e9,1" 2 "which keeps a run finite" 2 "$BUILD/bin/lesson_07_transformer_block" --link 1e9,1
expect "--link 0,1e-300 (the delay would vanish)" 2 "--link=0,1e-300: β = 1e-300 GB/s is outside the [0.1," 2 \
  "${tt[@]}" --link 0,1e-300

# 5. --decay-steps at or below --warmup is an error, not ignored: tests/train/test_train_flags.cpp.

# 6. Lesson flags agree with their help: lessons 13 and 13b say [2, 100000] and refuse 1 with that
# range.
log=$logs/check_lesson13_help.log
run_mpi 1 "$BUILD/bin/lesson_13_train_gpt" --help >"$log" 2>&1
run_mpi 1 "$BUILD/bin/lesson_13b_tp_or_sp" --help >>"$log" 2>&1
if grep -q -- '--steps=N .*(default: 20; in \[2, 100000\])' "$log" && grep -q -- '--steps=N .*(default: 5; in \[2, 100000\])' "$log"; then
  pass 1; echo "✓ lessons 13 and 13b's help: --steps in [2, 100000], the range they check"
else fail "lesson 13's or 13b's --help does not state --steps in [2, 100000] (see $log)"; fi
expect "lesson 13 --steps 1" 2 "--steps=1: must be in [2, 100000]" 4 "$BUILD/bin/lesson_13_train_gpt" --steps 1
expect "lesson 13b --steps 1" 2 "--steps=1: must be in [2, 100000]" 4 "$BUILD/bin/lesson_13b_tp_or_sp" --steps 1

# 7. Sizes no machine holds: one line in flag terms, no internal names, nothing wraps.
# (tp_train's --hidden 2^63-1, --pad-vocab-multiple 2^62, --hidden 2^31-1 and --batch 2^62, and that
# their lines name no internal type: tests/train/test_train_flags.cpp.)
expect "tp_preflight --hidden 2^31-1" 2 "more than any machine holds" 1 "$BUILD/bin/tp_preflight" --hidden 2147483647 --heads 1
# Large but countable: refused before any tensor is allocated (the preflight peak against the
# host memory), the line names positive sizes.
expect "a model too big for memory" 2 "MiB of memory in all; reduce --hidden, --ffn, --layers or --vocab" 1 "${tt[@]}" --hidden 1048576 --heads 1 --layers 1 --seq 16 --batch 1
for name in "a model too big for memory"; do
  log=$logs/check_${name// /_}.log
  if grep -qE 'GptConfig|negative dimension|about -|padded_vocab' "$log"; then
    fail "$name: an internal name or a wrapped size reached the user: $(grep -m1 error: "$log")"
  else pass 1; fi
done

# 8. A 100 GB sparse --data is read as needed, not loaded: it trains one step in seconds. (The file
# lives in $logs: the no-file-changed check would checksum all 100 GB of it under $tmp.)
sparse=$logs/sparse_100g.data
if truncate -s 100G "$sparse" 2>/dev/null; then
  WITHIN=30 expect "--data of a 100 GB sparse file" 0 "107374182400 bytes, V = 256, read as needed" 1 \
    "${tt[@]}" --hidden 32 --seq 16 --batch 2 --data "$sparse"
else
  echo "- skipped: --data of a 100 GB sparse file (truncate -s 100G failed in $logs)"
fi
rm -f "$sparse"

# 9. Every write checked: /dev/full takes the open and refuses the write (ENOSPC). --plot and
# --trace are found before the first step, --log-json at its first line.
for flag in log-json plot trace; do
  expect "--$flag onto dev-full" nonzero "error: --$flag /dev/full: write failed: No space left on device (ENOSPC)" 2 \
    "${train[@]}" --steps 3 "--$flag" /dev/full
done
WITHIN=15 expect "lesson 13 --plot onto dev-full" nonzero "error: --plot /dev/full: write failed: No space left on device (ENOSPC)" 4 \
  "$BUILD/bin/lesson_13_train_gpt" --plot /dev/full
for flag in plot trace; do
  if grep -q '^step ' "$logs/check_--${flag}_onto_dev-full.log"; then
    fail "--$flag /dev/full: the failure came after training had started"
  else pass 1; echo "✓ --$flag /dev/full: refused before the first step"; fi
done

# 10. --export-hf (and tp_export --hf) on a read-only file system says EROFS, before training. A
# read-only bind mount needs root; elsewhere one line says the case is skipped.
ro=$tmp/ro_mount
mountpoint -q "$ro" 2>/dev/null && umount "$ro"  # left by an interrupted run
mkdir -p "$ro.src" "$ro"
if mount --bind -o ro "$ro.src" "$ro" 2>/dev/null && ! touch "$ro/probe" 2>/dev/null; then
  expect "--export-hf on a read-only mount" 2 "Read-only file system (EROFS)" 1 "${tt[@]}" --export-hf "$ro/out"
  grep -q '^step ' "$logs/check_--export-hf_on_a_read-only_mount.log" &&
    fail "--export-hf on a read-only mount: found only after training"
  expect "--export-hf into a read-only folder" 2 "cannot create files in $ro (Read-only file system (EROFS))" 1 \
    "${tt[@]}" --export-hf "$ro"
  expect "tp_export --hf on a read-only mount" 2 "cannot create the export folder $ro/out: Read-only file system (EROFS)" 1 \
    "$BUILD/bin/tp_export" --load "$tmp/ck.safetensors" --hf "$ro/out"
  umount "$ro"
else
  mountpoint -q "$ro" 2>/dev/null && umount "$ro"
  echo "- skipped: --export-hf on a read-only file system (mount --bind -o ro needs root here)"
fi
rmdir "$ro" "$ro.src" 2>/dev/null
