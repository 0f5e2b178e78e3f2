# checkpoint.sh — checkpoints that cannot lie (issue 19): sourced by scripts/run-tests.sh after
# section 8, with expect, pass, fail, run_mpi, $tmp, $logs, $BUILD and train/tt/ld in scope.
# The crafted files come from the real checkpoint $tmp/ck.safetensors (tp_train --save at t = 2),
# written by scripts/tests/checkpoint_craft.py (its docstring lists them). Each refusal: exit 2,
# one line naming the file and the key or tensor, no file changed.
if ! python3 scripts/tests/checkpoint_craft.py "$tmp/ck.safetensors" "$tmp" >"$logs/checkpoint_craft.log" 2>&1; then
  fail "checkpoint_craft.py could not write the crafted checkpoints (see $logs/checkpoint_craft.log)"
else
  gen_of() { echo "$BUILD/bin/tp_generate" --prompt TP --tokens 2 --load "$1"; }
  # A flipped bit: the tensor's CRC-32C no longer fits; named by tensor and file.
  expect "checkpoint: a flipped bit in tensor data" 2 "tensor 'transformer.wte.weight' fails its checksum (crc32c" 2 "${ld[@]}" "$tmp/ck_bitflip.safetensors"
  expect "tp_generate: a flipped bit" 2 "ck_bitflip.safetensors: tensor '" 2 $(gen_of "$tmp/ck_bitflip.safetensors")
  # Sizes from metadata are checked against the tensors before anything is allocated from them.
  WITHIN=5 expect "tp_generate: metadata claims a million layers" 2 "ck_layers_1e6.safetensors: metadata layers=1000000 contradicts its tensors" 2 \
    $(gen_of "$tmp/ck_layers_1e6.safetensors")
  WITHIN=5 expect "tp_train: metadata claims a million layers" 2 "metadata layers=1000000 contradicts its tensors: it has blocks transformer.h.0 .. transformer.h.1, so layers=2" 2 \
    "${ld[@]}" "$tmp/ck_layers_1e6.safetensors"
  WITHIN=5 expect "tp_generate: metadata claims 2^31 vocabulary rows" 2 "metadata vocab=2147483648 contradicts its tensors: tensor transformer.wte.weight has 256 rows" 2 \
    $(gen_of "$tmp/ck_vocab_2e31.safetensors")
  # heads: c_attn's shape gives kv_heads/heads; with both edited the configuration checksum names the heads saved.
  expect "checkpoint: heads=6 in a 12-head file" 2 "metadata heads=6 (with kv_heads=12) contradicts its tensors: tensor transformer.h.0.attn.c_attn.weight has shape [48, 144]" 2 \
    "${ld[@]}" "$tmp/ck_heads6.safetensors"
  expect "tp_generate: heads=6, kv_heads=6 in a 12-head file" 2 "metadata heads=6, kv_heads=6 were changed after the file was saved: its config_crc32c=" 2 \
    $(gen_of "$tmp/ck_heads6_kv6.safetensors")
  expect "tp_export: heads=6, kv_heads=6 in a 12-head file" 2 "fits heads=12, kv_heads=12" 1 \
    "$BUILD/bin/tp_export" --load "$tmp/ck_heads6_kv6.safetensors" --hf "$tmp/hf_heads6"
  # AdamW's step count against its moments, and its second moment's sign.
  expect "checkpoint: adam_steps=0 with trained moments" 2 "metadata adam_steps=0, but tensor optimizer.exp_avg." 2 "${ld[@]}" "$tmp/ck_adam0.safetensors"
  expect "checkpoint: adam_steps missing with moments" 2 "holds AdamW moments (optimizer.exp_avg.*) but no metadata adam_steps" 2 "${ld[@]}" "$tmp/ck_adam_missing.safetensors"
  expect "checkpoint: -1 in exp_avg_sq" 2 "holds -1 (element 3), but AdamW's second moment is a mean of squares" 2 "${ld[@]}" "$tmp/ck_neg_v.safetensors"
  # 200k metadata keys (an 8 MB header): read, or refused for a duplicate, in seconds, not minutes.
  expect "checkpoint: 200k metadata keys" 0 "loaded $tmp/ck_keys_200k.safetensors at step 10" 2 "${ld[@]}" "$tmp/ck_keys_200k.safetensors"
  expect "checkpoint: 200k metadata keys, one twice" 2 "the header names 'k000000' twice" 2 "${ld[@]}" "$tmp/ck_keys_200k_dup.safetensors"
  # A file without checksums (older checkpoints, hub files) loads, with one line saying so.
  expect "checkpoint without checksums: a note" 0 "carries no checksums" 2 "${ld[@]}" "$tmp/ck_no_crc.safetensors"
fi

# --save on a device: refused before the first step, not after training.
WITHIN=5 expect "--save onto the full device" 2 "--save: cannot write checkpoint /dev/full: it is a device; give the path of a file" 2 "${tt[@]}" --save /dev/full

# A full disk, on a tmpfs in a private mount namespace (unshare -m: nothing outside sees it; it
# vanishes with the namespace): too small for the checkpoint is refused up front (statvfs); a disk
# that fills during training makes the (emergency) save fail at the write with ENOSPC, in one
# line, the temporary file removed. (EROFS is not tried: the run's lock file, open for writing,
# keeps the tmpfs from being remounted read-only.)
mnt=$tmp/tiny_fs
mkdir -p "$mnt"
if ! unshare -m sh -c "mount -t tmpfs -o size=64k tp_ckpt_test '$mnt' && umount '$mnt'" >/dev/null 2>&1; then
  echo "full-disk checks skipped: no private tmpfs here (unshare -m and mount need CAP_SYS_ADMIN)"; skipped=$((skipped + 1))
else
  SECONDS=0
  unshare -m sh -c "mount -t tmpfs -o size=64k tp_ckpt_test '$mnt' &&
    exec timeout 60 $MPIEXEC $MPI_FLAGS -np 2 ${train[*]} --steps 1 --save '$mnt/ck.safetensors'" </dev/null >"$logs/check_save_tiny_fs.log" 2>&1
  rc=$?
  if [ "$rc" = 2 ] && [ "$SECONDS" -le 10 ] && [ "$(grep -c 'error:' "$logs/check_save_tiny_fs.log")" = 1 ] &&
     grep -q "cannot write checkpoint $mnt/ck.safetensors: it needs .* but its folder $mnt/ has .* free" "$logs/check_save_tiny_fs.log" &&
     ! grep -q "^step " "$logs/check_save_tiny_fs.log"; then
    pass 1; echo "✓ --save on a 64 KiB file system: refused before training after ${SECONDS}s, says: $(grep error: "$logs/check_save_tiny_fs.log")"
  else fail "--save on a 64 KiB file system: exit $rc after ${SECONDS}s, not refused up front (see $logs/check_save_tiny_fs.log)"; fi
  for fault in ENOSPC; do
    log=$logs/check_save_$fault.log
    break_it="dd if=/dev/zero of='$mnt/fill' bs=4k >/dev/null 2>&1"
    unshare -m sh -c "mount -t tmpfs -o size=8m tp_ckpt_test '$mnt' || exit 99
      $MPIEXEC $MPI_FLAGS -np 1 ${train[*]} --steps 100000000 --save '$mnt/ck.safetensors' </dev/null >'$log' 2>&1 &
      run=\$!
      for _ in \$(seq 300); do grep -q '^step ' '$log' && break; sleep 0.1; done
      $break_it
      kill -TERM \$run; wait \$run; rc=\$?
      ls '$mnt' >>'$log'; exit \$rc" </dev/null >/dev/null 2>&1
    rc=$?
    # (MPICH's mpirun, itself signalled, may return 0: see the SIGTERM check in section 5.)
    if { [ "$rc" != 0 ] || [ "$mpich" = yes ]; } && grep -q "cannot write checkpoint $mnt/ck.safetensors: write to .* failed after [0-9]* of [0-9]* bytes: .*($fault)" "$log" &&
       ! grep -qx "ck.safetensors.tmp.[0-9]*" "$log"; then
      pass 1; echo "✓ a save that meets $fault: exit $rc, the temporary file removed, says: $(grep -o 'cannot write checkpoint.*' "$log" | head -1)"
    else fail "a save that meets $fault: exit $rc, no line with $fault or a temporary file left (see $log)"; fi
  done
fi
