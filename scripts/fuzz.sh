#!/usr/bin/env bash
# fuzz.sh — make fuzz: libFuzzer (clang, AddressSanitizer + UBSan) on the safetensors reader, a
# checkpoint's metadata against its tensors, and the option parser, each for FUZZ_SECONDS (default
# 60; FUZZ_SECONDS=600 for a long run), seeded with real files: a checkpoint and a gradient dump
# written by tp_train, the metadata such a checkpoint records (and edits of it), and typical
# command lines.
# Prints the executions per target and exits non-zero on any finding (the crashing input is kept
# in $BUILD/fuzz/ as crash-*).
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build}
secs=${FUZZ_SECONDS:-60}
out=$BUILD/fuzz
mkdir -p "$out/corpus_safetensors" "$out/corpus_options" "$out/corpus_checkpoint_meta"
# Seeds.
if [ ! -s "$out/corpus_safetensors/seed_checkpoint.safetensors" ]; then
  "$BUILD/bin/tp_train" --layers 1 --hidden 8 --heads 2 --seq 4 --batch 1 --vocab 16 --steps 1 \
    --save "$out/corpus_safetensors/seed_checkpoint.safetensors" \
    --dump-grads "$out/corpus_safetensors/seed_grads.safetensors" >"$out/seeds.log" 2>&1 ||
    { echo "✗ fuzz: could not write the seed checkpoint (see $out/seeds.log)"; exit 1; }
  rm -f "$out"/corpus_safetensors/*.lock
fi
i=0
for line in "--layers 2 --lr 3e-4 --sp" "--seq=128 --dropout 0.1 --act swiglu" "--save run.safetensors --kv-heads 2" \
            "--lr=1e-3 --scale -2.5e+10" "--help" "-h" "--layers" "--dropout=1"; do
  printf '%s' "$line" | tr ' ' '\n' >"$out/corpus_options/seed_$i"; i=$((i + 1))
done
# The metadata of fuzz_checkpoint_meta's tiny checkpoint ("!": with its config_crc32c), and edits.
meta='layers=2 hidden=8 heads=2 kv_heads=2 ffn=32 vocab=16 seq=4 act=gelu norm=layernorm tied=true step=3 adam_steps=3'
i=0
for edit in "" "layers=1000000" "vocab=2147483648" "heads=4" "heads=4 kv_heads=4" "adam_steps=0" "act=relu"; do
  { echo '!'; echo "$meta $edit" | tr ' ' '\n' | grep .; } >"$out/corpus_checkpoint_meta/seed_$i"; i=$((i + 1))
done
echo "$meta" | tr ' ' '\n' >"$out/corpus_checkpoint_meta/seed_no_checksum"
fail=0
for target in safetensors checkpoint_meta options; do
  log=$out/fuzz_$target.log
  (cd "$out" && ./fuzz_$target -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 \
     -print_final_stats=1 "corpus_$target" >"fuzz_$target.log" 2>&1)
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ $rc = 0 ]; then
    echo "✓ fuzz_$target: ${runs:-?} executions in ${secs} s, $cov, no findings"
  else
    echo "✗ fuzz_$target: exit $rc after ${runs:-?} executions (see $log; the input is $out/crash-*)"
    fail=1
  fi
done
exit $fail
