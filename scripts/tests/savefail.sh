# savefail.sh — issue 39: a save that fails ends every rank, at once, with one line; no --save
# writes nothing; leftovers of killed saves go (sourced by scripts/run-tests.sh, section 8b).
#
# 1. A periodic, end-of-run or --export-hf write whose target is a folder (a fault that holds for
#    root too), at np 2 and at tp 2 × dp 2: exit ≠ 0 within 15 s, one "error:" line naming the flag,
#    the path and what survives, no file that was there before changed. 2. The same for the
#    emergency save of a SIGTERM after the --save folder was replaced by a file mid-run (ENOTDIR).
# 3. Without --save: a SIGTERM writes nothing and says so; the working folder may be read-only.
# 4. Stale "<file>.tmp.<pid>" and "<file>.lock" of dead processes are removed by the next save to
#    the series, whatever its step; a live process's are kept.

sf=$tmp/savefail
rm -rf "$sf"; mkdir -p "$sf"
sf_mpich=no; "$MPIEXEC" --version 2>&1 | grep -q HYDRA && sf_mpich=yes
# The runs that start in another working folder (section 3) take these.
sf_logs=$(realpath "$logs")
sf_train=("$(realpath "$BUILD/bin/tp_train")" "${train[@]:1}")

# lacks NAME LOG TEXT: passes when LOG does not hold TEXT.
lacks() {
  if grep -qF -- "$3" "$2"; then fail "$1: says '$3' (see $2)"; else pass 1; echo "✓ $1: does not say '$3'"; fi
}

# 1. A folder where the file should go.
for np in 2 4; do
  grid=(); [ "$np" = 4 ] && grid=(--dp 2)
  d=$sf/periodic$np
  mkdir -p "$d/checkpoint-step000004.safetensors"
  WITHIN=15 expect "periodic save onto a folder, np $np" nonzero \
    "--save $d/: cannot write checkpoint $d/checkpoint-step000004.safetensors: it is a directory" \
    "$np" "${train[@]}" --steps 6 --save "$d/" --save-every 2 "${grid[@]}"
  if grep -q "error: .*the newest checkpoint of this run, $d/checkpoint-step000002.safetensors (step 2), is intact" \
       "$logs/check_periodic_save_onto_a_folder,_np_$np.log"; then
    pass 1; echo "✓ periodic save onto a folder, np $np: names step 2's file as intact"
  else fail "periodic save onto a folder, np $np: does not name $d/checkpoint-step000002.safetensors as intact"; fi

  d=$sf/end$np
  mkdir -p "$d/checkpoint-step000003.safetensors"
  WITHIN=15 expect "end-of-run save onto a folder, np $np" nonzero \
    "--save $d/: cannot write checkpoint $d/checkpoint-step000003.safetensors: it is a directory" \
    "$np" "${train[@]}" --steps 3 --save "$d/" --save-every 2 "${grid[@]}"
  lacks "end-of-run save onto a folder, np $np" "$logs/check_end-of-run_save_onto_a_folder,_np_$np.log" \
    "rerun with --load $d/checkpoint-step000003.safetensors"

  d=$sf/export$np
  mkdir -p "$d/model.safetensors"
  WITHIN=15 expect "--export-hf onto a folder, np $np" nonzero \
    "--export-hf $d: cannot write checkpoint $d/model.safetensors: it is a directory" \
    "$np" "${train[@]}" --steps 1 --export-hf "$d" "${grid[@]}"
  lacks "--export-hf onto a folder, np $np" "$logs/check_--export-hf_onto_a_folder,_np_$np.log" "give --save"
done

# sf_term LOG NP BREAK ARGS...: starts tp_train ARGS at NP ranks, runs BREAK after its first step,
# then sends mpirun SIGTERM and waits at most 15 s. Sets rc (999: hung, killed).
sf_term() {
  local log=$1 np=$2 break_it=$3 pid; shift 3
  # shellcheck disable=SC2086  # MPI_FLAGS: several words
  "$MPIEXEC" $MPI_FLAGS -np "$np" "$@" --steps 1000000 --log-every 1 </dev/null >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do grep -q "^step " "$log" && break; sleep 0.1; done
  eval "$break_it"
  kill -TERM "$pid"
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    # shellcheck disable=SC2046  # one pid per word
    kill -KILL $(descendants "$pid") "$pid" 2>/dev/null
    wait "$pid"; rc=999
  else
    wait "$pid"; rc=$?
  fi
}

# 2. The emergency save of a SIGTERM, the --save folder replaced by a file after the first step.
for np in 2 4; do
  grid=(); [ "$np" = 4 ] && grid=(--dp 2)
  d=$sf/term$np log=$logs/savefail_term_np$np.log
  mkdir -p "$d"
  sf_term "$log" "$np" "rm -rf '$d'; echo in-the-way >'$d'" "${train[@]}" --save "$d/" "${grid[@]}"
  if [ "$rc" = 999 ]; then fail "emergency save into a folder replaced by a file, np $np: hung 15 s after SIGTERM (see $log)"
  elif { [ "$rc" != 0 ] || [ "$sf_mpich" = yes ]; } && [ "$(grep -c 'error:' "$log")" = 1 ] &&
       grep -q "error: .*--save $d/: cannot write checkpoint $d/checkpoint-step0*[0-9]*\.safetensors: .*(ENOTDIR)" "$log" &&
       [ "$(cat "$d")" = in-the-way ]; then
    pass 1; echo "✓ emergency save into a folder replaced by a file, np $np: exit $rc, says: $(grep -o 'error:.*' "$log" | cut -c1-160)"
  else fail "emergency save into a folder replaced by a file, np $np: exit $rc, not one error line naming --save, the path and ENOTDIR (see $log)"; fi
done

# 3. No --save: nothing written, one line; a read-only working folder (/proc: not even root
#    creates files there) does not matter.
mkdir -p "$sf/nosave"
log=$sf_logs/savefail_nosave_term.log
(cd "$sf/nosave" && sf_term "$log" 2 "" "${sf_train[@]}"; exit "$rc")
rc=$?
if [ "$rc" != 999 ] && grep -q "no --save: nothing written" "$log" && [ -z "$(ls -A "$sf/nosave")" ] &&
   ! grep -q "emergency checkpoint" "$log"; then
  pass 1; echo "✓ SIGTERM without --save: exit $rc, nothing written, says: $(grep -o 'stopped by.*' "$log" | head -1)"
else fail "SIGTERM without --save: exit $rc, wrote $(ls -A "$sf/nosave" | head -3 | tr '\n' ' ')or lacks 'no --save: nothing written' (see $log)"; fi
log=$sf_logs/savefail_readonly_cwd.log
(cd /proc && run_mpi 2 "${sf_train[@]}" --steps 1) >"$log" 2>&1
rc=$?
if [ "$rc" = 0 ] && ! grep -q "step0*\.safetensors" "$log"; then pass 1; echo "✓ no --save, working folder /proc: exit 0"
else fail "no --save, working folder /proc: exit $rc (see $log)"; fi

# 4. Leftovers of killed saves: a dead process's temporary file and lock (of other steps than the
#    next save's) are removed, with one line naming them; a live process's are kept.
d=$sf/leftovers
mkdir -p "$d"
sleep 0 & dead=$!; wait "$dead"
sleep 60 & live=$!
: >"$d/checkpoint-step000002.safetensors.tmp.$dead"
echo "$dead" >"$d/checkpoint-step000002.safetensors.lock"
: >"$d/checkpoint-step000004.safetensors.tmp.$live"
echo "$live" >"$d/checkpoint-step000004.safetensors.lock"
log=$logs/savefail_leftovers.log
run_mpi 2 "${tt[@]}" --save "$d/" >"$log" 2>&1
rc=$?
if [ "$rc" = 0 ] && [ ! -e "$d/checkpoint-step000002.safetensors.tmp.$dead" ] &&
   [ ! -e "$d/checkpoint-step000002.safetensors.lock" ] &&
   [ -e "$d/checkpoint-step000004.safetensors.tmp.$live" ] && [ -e "$d/checkpoint-step000004.safetensors.lock" ] &&
   [ "$(grep "^removed " "$log" | grep "checkpoint-step000002.safetensors.tmp.$dead" | grep -c "checkpoint-step000002.safetensors.lock")" = 1 ]; then
  pass 1; echo "✓ leftovers of a killed save removed by the next save: $(grep -o 'removed.*' "$log" | cut -c1-160)"
else fail "leftovers of a killed save: exit $rc; $(ls "$d" | tr '\n' ' ')left (see $log)"; fi
kill "$live" 2>/dev/null; wait "$live" 2>/dev/null

# 5. Room for --keep + 1 files, checked before training: a 1 MiB tmpfs (in a private mount
#    namespace, as checkpoint.sh's full disk) takes one checkpoint of 620 KiB, not --keep 3 + 1.
mnt=$tmp/savefail_fs
mkdir -p "$mnt"
if ! unshare -m sh -c "mount -t tmpfs -o size=1m tp_savefail_test '$mnt' && umount '$mnt'" >/dev/null 2>&1; then
  echo "--keep room check skipped: no private tmpfs here (unshare -m and mount need CAP_SYS_ADMIN)"; skipped=$((skipped + 1))
else
  log=$logs/savefail_keep_room.log
  SECONDS=0
  unshare -m sh -c "mount -t tmpfs -o size=1m tp_savefail_test '$mnt' &&
    exec timeout 60 $MPIEXEC $MPI_FLAGS -np 2 ${train[*]} --steps 8 --save '$mnt/' --save-every 2 --keep 3" </dev/null >"$log" 2>&1
  rc=$?
  if [ "$rc" = 2 ] && [ "$(grep -c 'error:' "$log")" = 1 ] && ! grep -q "^step " "$log" &&
     grep -q "error: --save: cannot write checkpoint $mnt/checkpoint-step000000.safetensors: it needs .* free.*(room for 4 files: --keep + 1 with --save-every)" "$log"; then
    pass 1; echo "✓ --save-every 2 --keep 3 on a 1 MiB file system: refused before training, says: $(grep -o 'error:.*' "$log" | cut -c1-200)"
  else fail "--save-every 2 --keep 3 on a 1 MiB file system: exit $rc, not refused before training with room for 4 files (see $log)"; fi
fi

# 6. --dump-grads written by one rank that fails (a device): before its write took part in the
#    agreement, the writer ended alone and the others hung in the next step's collectives.
for np in 2 4; do
  WITHIN=20 expect "--dump-grads to a device, np $np" 2 "error: --dump-grads /dev/full: cannot write" $np \
    "${train[@]}" --steps 2 --dump-grads /dev/full
done
