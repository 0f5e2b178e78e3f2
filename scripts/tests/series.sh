# shellcheck shell=bash disable=SC2154  # sourced by run-tests.sh, which sets $tmp, $logs, $BUILD
# series.sh — issue 39: a run deletes only the checkpoints it wrote, or that the run it resumed
# wrote (model/checkpoint_series.h). Every file records its run (metadata run_id); a fresh run on
# another run's --save series is refused (or, with --replace-series, deletes it at its first
# checkpoint); --resume auto orders by the step in the metadata, never deletes a file it could not
# read, and names the errno of a folder it cannot list; `--resume=` is refused; a checkpoint of
# BPE ids does not continue on bytes. Sourced by run-tests.sh (section 8b).
se=$tmp/series
rm -rf "$se"; mkdir -p "$se"

# meta FILE KEY [VALUE]: sets metadata KEY of checkpoint FILE to VALUE, or removes it (no VALUE).
# run_id and tokens are outside config_crc32c, so the file stays valid.
meta() {
  python3 - "$@" <<'EOF'
import json, struct, sys
path, key = sys.argv[1], sys.argv[2]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
md = head.setdefault("__metadata__", {})
if len(sys.argv) > 3: md[key] = sys.argv[3]
else: md.pop(key, None)
text = json.dumps(head, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
EOF
}
# has_files DIR STEP...: every DIR/checkpoint-stepNNNNNN.safetensors of STEP... is there.
has_files() {
  local dir=$1 s; shift
  for s in "$@"; do [ -f "$dir/$(printf 'checkpoint-step%06d.safetensors' "$s")" ] || return 1; done
}

# Another run's series: steps 2, 4, 6 (--keep 5 keeps them all).
run_mpi 1 "${train[@]}" --steps 6 --save "$se/other/" --save-every 2 --keep 5 >"$logs/series_other.log" 2>&1 ||
  fail "tp_train writing a series exited non-zero (see $logs/series_other.log)"
other_id=$(sed -n 's/^run id \([^ ]*\) (new)$/\1/p' "$logs/series_other.log")
if [ -n "$other_id" ] && has_files "$se/other" 2 4 6; then
  pass 1; echo "✓ a fresh run prints its run id ($other_id) and writes steps 2, 4, 6"
else fail "no 'run id ... (new)' line or no steps 2, 4, 6 (see $logs/series_other.log)"; fi
cp -r "$se/other" "$se/base"  # the copies below start from it: each check stands alone

# 1. A fresh run on it is refused (one line naming the run and its newest step), and deletes nothing
#    (expect checks every file under $tmp: before the fix it deleted all three at its first save).
expect "a fresh run on another run's series" 2 \
  "--save $se/other/ holds run $other_id up to step 6 (3 files, steps 2..6); give --resume auto to continue it" 2 \
  "${train[@]}" --steps 2 --save "$se/other/" --save-every 1
# Files from before run ids (no run_id): another run's too.
cp -r "$se/base" "$se/old"
for f in "$se"/old/*.safetensors; do meta "$f" run_id; done
expect "a fresh run on a series from before run ids" 2 \
  "--save $se/old/ holds checkpoints written before run ids (no run_id) up to step 6" 2 \
  "${train[@]}" --steps 2 --save "$se/old/" --save-every 1
# --load of a file elsewhere does not continue this series: refused too.
expect "--load of another file onto another run's series" 2 "holds run $other_id up to step 6" 2 \
  "${train[@]}" --steps 1 --save "$se/other/" --load "$se/old/checkpoint-step000002.safetensors"
expect "an empty --resume= (an unset variable)" 2 "--resume= is empty (an unset variable?); give a value" 1 \
  "${tt[@]}" --save "$se/other/" --save-every 1 --resume=

# 2. --load of one of its files continues the run: its id, and its own later steps pruned by --keep.
cp -r "$se/base" "$se/cont"
run_mpi 1 "${train[@]}" --steps 2 --save "$se/cont/" --save-every 1 --keep 2 \
  --load "$se/cont/checkpoint-step000004.safetensors" >"$logs/series_load.log" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^run id $other_id (continued from $se/cont/checkpoint-step000004.safetensors)" "$logs/series_load.log" &&
   has_files "$se/cont" 5 6 && ! has_files "$se/cont" 4; then
  pass 1; echo "✓ --load of a file of the series continues run $other_id (its files pruned by --keep 2)"
else fail "--load of a file of the series: exit $rc, or not run $other_id, or not pruned (see $logs/series_load.log)"; fi

# --resume auto of a series from before run ids (--steps 8: the step it ends at): it continues
# (a new run id), and never deletes the old files (--keep counts only its own).
cp -r "$se/old" "$se/old_res"
run_mpi 1 "${train[@]}" --steps 8 --save "$se/old_res/" --save-every 1 --keep 1 --resume auto \
  >"$logs/series_old_resume.log" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^run id .* (new)" "$logs/series_old_resume.log" && has_files "$se/old_res" 2 4 6 8 &&
   ! has_files "$se/old_res" 7; then
  pass 1; echo "✓ --resume auto of files without a run id: a new run id; the old files stay, its own are pruned"
else fail "--resume auto of files without a run id: exit $rc, or the old files were touched: $(cd "$se/old_res" && echo *) (see $logs/series_old_resume.log)"; fi

# 3. --replace-series: one line saying what it will delete; the files go after its first save.
cp -r "$se/base" "$se/repl"
run_mpi 1 "${train[@]}" --steps 2 --save "$se/repl/" --save-every 1 --keep 5 --replace-series \
  >"$logs/series_replace.log" 2>&1
rc=$?
note=$(grep -n "^--replace-series: the first checkpoint of this run deletes run $other_id in $se/repl/ (3 files, steps 2..6)" "$logs/series_replace.log" | cut -d: -f1)
first=$(grep -n "^saved $se/repl/checkpoint-step000001" "$logs/series_replace.log" | cut -d: -f1)
gone=$(grep -n "^removed $se/repl/checkpoint-step000006.safetensors: step 6 of run $other_id (--replace-series)" "$logs/series_replace.log" | cut -d: -f1)
if [ $rc = 0 ] && [ -n "$note" ] && [ -n "$first" ] && [ -n "$gone" ] && [ "$note" -lt "$gone" ] &&
   [ "$gone" -lt "$first" ] && has_files "$se/repl" 1 2 && ! has_files "$se/repl" 4 && ! has_files "$se/repl" 6; then
  pass 1; echo "✓ --replace-series: $(sed -n "${note}p" "$logs/series_replace.log" | cut -c1-120)…; deleted at its first save"
else fail "--replace-series: exit $rc, or its note / deletion at the first save missing (see $logs/series_replace.log)"; fi

# 4. --resume auto: a newest file it cannot read is skipped and kept (not removed as "past this
#    run's step"); a file named step 50 holding step 2 is not taken for the newest.
cp -r "$se/base" "$se/skip"
if [ "$(id -u)" = 0 ]; then printf 'unreadable' >"$se/skip/checkpoint-step000008.safetensors"  # root reads any file
else cp "$se/base/checkpoint-step000006.safetensors" "$se/skip/checkpoint-step000008.safetensors"
  chmod 000 "$se/skip/checkpoint-step000008.safetensors"; fi
cp "$se/base/checkpoint-step000002.safetensors" "$se/skip/checkpoint-step000050.safetensors"
run_mpi 1 "${train[@]}" --steps 7 --save "$se/skip/" --save-every 1 --keep 10 --resume auto \
  >"$logs/series_skip.log" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^--resume: skipped $se/skip/checkpoint-step000008.safetensors" "$logs/series_skip.log" &&
   grep -q "loaded $se/skip/checkpoint-step000006.safetensors at step 6" "$logs/series_skip.log" &&
   has_files "$se/skip" 2 4 6 7 8 50; then
  pass 1; echo "✓ --resume auto takes step 6 (not the file named step 50 holding step 2), skips and keeps the unreadable step 8"
else fail "--resume auto: exit $rc, or it took the wrong file, or deleted what it skipped: $(cd "$se/skip" && echo *) (see $logs/series_skip.log)"; fi
chmod 600 "$se/skip/checkpoint-step000008.safetensors"

# 5. A folder it cannot list is an error naming the errno, not "no checkpoint" or a fresh start.
ln -s loop "$se/loop"
expect "--resume auto on a folder it cannot list" 2 "cannot list the folder $se/loop: Too many levels of symbolic links (ELOOP)" 2 \
  "${tt[@]}" --save "$se/loop/" --resume auto
expect "--resume auto-or-fresh on a folder it cannot list" 2 "(ELOOP)" 2 \
  "${tt[@]}" --save "$se/loop/" --resume auto-or-fresh
if [ "$(id -u)" != 0 ]; then
  mkdir -p "$se/locked"; chmod 000 "$se/locked"
  expect "--resume auto on a folder without read permission" 2 "(EACCES)" 2 \
    "${tt[@]}" --save "$se/locked/" --resume auto-or-fresh
  chmod 700 "$se/locked"
fi

# 6. A checkpoint of BPE ids (metadata tokens=gpt2-bpe) does not continue on --data as bytes.
run_mpi 1 "${train[@]}" --steps 1 --data README.md --save "$se/bytes.safetensors" >"$logs/series_bytes.log" 2>&1 ||
  fail "tp_train --data --save exited non-zero (see $logs/series_bytes.log)"
cp "$se/bytes.safetensors" "$se/bpe.safetensors"; meta "$se/bpe.safetensors" tokens gpt2-bpe
expect "a BPE checkpoint continued on bytes" 2 "$se/bpe.safetensors was trained on GPT-2 BPE ids (--tokenizer), but --data README.md would be read as bytes" 1 \
  "${train[@]}" --steps 1 --data README.md --load "$se/bpe.safetensors"
expect "a bytes checkpoint continued on bytes" 0 "loaded $se/bytes.safetensors" 1 \
  "${train[@]}" --steps 1 --data README.md --load "$se/bytes.safetensors"
