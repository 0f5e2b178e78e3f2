# cp.sh — issue 42's context parallelism on tp_train: --cp, --cp-layout (sourced by
# scripts/run-tests.sh, section 8b).
#
# Bad input: one line each, exit 2, within 10 s. Then 20-step loss curves against t = 1 within
# 1e-4 relative at every step (same_curve; the ring's merge and the CP average add in another
# order): cp 2 zigzag and contiguous, cp 4, tp 2 × cp 2 with and without --sp, cp 2 × pp 2,
# cp 2 × dp 2 (and with --zero 1), tp 2 × cp 2 with full recomputation and micro-batches and with
# SP's ring overlap, cp 2 with dropout (the masks keyed by global rows: one device's); bf16 cp 2 and
# tp 2 × cp 2 against t = 1 bf16. The first step's gradients (--dump-grads) at cp 2 and
# tp 2 × cp 2 against t = 1 within 1e-5. Checkpoints stay global: a cp 2 run's checkpoint resumes
# at cp 1 and a t = 1 run's at cp 4, on the uninterrupted t = 1 curve.

# 1. Bad input.
expect "--cp not dividing np" 2 "--cp=2 does not divide the 3 ranks" 3 "${tt[@]}" --cp 2
expect "--seq not splitting into 2·cp chunks" 2 "is not divisible by 4" 2 "${tt[@]}" --cp 2 --seq 6
expect "--cp-layout unknown" 2 "--cp-layout=spiral: expected one of zigzag, contiguous" 2 \
  "${tt[@]}" --cp 2 --cp-layout spiral
expect "--sp with --cp: the positions per CP rank not divisible by t" 2 "--sp with --cp=2: each CP rank's 3 positions must split over t=2" 4 \
  "${tt[@]}" --cp 2 --cp-layout contiguous --seq 6 --sp
expect "--audit-grads with --cp" 2 "--audit-grads with --cp=2: not implemented for context parallelism" 2 \
  "${tt[@]}" --cp 2 --audit-grads
expect "--cp 0" 2 "--cp" 1 "${tt[@]}" --cp 0

# 2. Loss curves against t = 1 (24 steps: the first 20 for the curves, the rest for the resume).
rm -f "$tmp"/cp_*.json "$tmp"/cp_*.safetensors "$tmp"/cpg_*.safetensors  # --log-json appends
cp_ref() {  # cp_ref NAME ARGS...: the t = 1 reference run $tmp/cp_NAME.json
  local name=$1; shift
  run_mpi 1 "${train[@]}" --log-json "$tmp/cp_$name.json" "$@" >"$logs/cp_$name.log" 2>&1 ||
    fail "tp_train -np 1 $* (a CP reference) exited non-zero (see $logs/cp_$name.log)"
}
cp_curve() {  # cp_curve NAME REFERENCE.json NP ARGS...: 20 steps of tp_train ARGS against REFERENCE
  local name=$1 ref=$2 np=$3 json=$tmp/cp_${1// /_}.json; shift 3
  run_mpi "$np" "${train[@]}" --steps 20 --log-json "$json" "$@" >"$logs/cp_${name// /_}.log" 2>&1 ||
    fail "tp_train $* at -np $np exited non-zero (see $logs/cp_${name// /_}.log)"
  same_curve "20-step loss curve, $name vs t = 1" "$ref" "$json"
}
cp_ref t1 --steps 24
cp_curve "cp 2 zigzag" "$tmp/cp_t1.json" 2 --cp 2 --save "$tmp/cp_cp2_at20.safetensors"
cp_curve "cp 2 contiguous" "$tmp/cp_t1.json" 2 --cp 2 --cp-layout contiguous
cp_curve "cp 4" "$tmp/cp_t1.json" 4 --cp 4
cp_curve "tp 2 x cp 2" "$tmp/cp_t1.json" 4 --cp 2
cp_curve "tp 2 x cp 2 sp" "$tmp/cp_t1.json" 4 --cp 2 --sp
cp_curve "cp 2 x pp 2" "$tmp/cp_t1.json" 4 --cp 2 --pp 2
cp_curve "cp 2 x dp 2" "$tmp/cp_t1.json" 4 --cp 2 --dp 2
cp_curve "cp 2 x dp 2 zero 1" "$tmp/cp_t1.json" 4 --cp 2 --dp 2 --zero 1
cp_curve "tp 2 x cp 2 recompute full, micro-batches 2" "$tmp/cp_t1.json" 4 --cp 2 --recompute full --micro-batches 2
cp_curve "tp 2 x cp 2 sp overlap ring" "$tmp/cp_t1.json" 4 --cp 2 --sp --overlap ring
cp_ref t1_dropout --steps 20 --dropout 0.1
cp_curve "cp 2 dropout" "$tmp/cp_t1_dropout.json" 2 --cp 2 --dropout 0.1
# bf16: the ring merges bf16 partial outputs (each merge rounds once more than one device's
# softmax), so the curves are compared at the bf16 runs' 1 %.
cp_ref t1_bf16 --steps 20 --precision bf16
TOL=1e-2 cp_curve "cp 2 bf16" "$tmp/cp_t1_bf16.json" 2 --cp 2 --precision bf16
TOL=1e-2 cp_curve "tp 2 x cp 2 sp bf16" "$tmp/cp_t1_bf16.json" 4 --cp 2 --sp --precision bf16
if grep -q "grid: tp 2 × cp 2 × dp 1 (TP groups {0, 1} {2, 3}; CP groups {0, 2} {1, 3}" \
  "$logs/cp_tp_2_x_cp_2.log" 2>/dev/null; then
  pass 1; echo "✓ tp 2 × cp 2: $(grep -o 'grid: .*' "$logs/cp_tp_2_x_cp_2.log")"
else fail "tp 2 × cp 2: no grid line with the CP groups (see $logs/cp_tp_2_x_cp_2.log)"; fi

# 3. The first step's gradients (--dump-grads) against t = 1.
cpg_run() {  # cpg_run NAME NP ARGS...: one step, --dump-grads $tmp/cpg_NAME.safetensors
  local name=$1 np=$2; shift 2
  run_mpi "$np" "${train[@]}" --steps 1 --dump-grads "$tmp/cpg_$name.safetensors" "$@" \
    >"$logs/cpg_$name.log" 2>&1 ||
    fail "tp_train $* --dump-grads at -np $np exited non-zero (see $logs/cpg_$name.log)"
}
cpg_run t1 1
for grid in "cp2 2 --cp 2" "cp2contiguous 2 --cp 2 --cp-layout contiguous" "tp2cp2 4 --cp 2"; do
  set -- $grid
  name=$1; shift
  cpg_run "$name" "$@"
  if said=$(python3 scripts/tests/grads_close.py "$tmp/cpg_t1.safetensors" "$tmp/cpg_$name.safetensors" 1e-5 2>&1); then
    pass 1; echo "✓ --dump-grads at -np ${grid#* } vs t = 1: $said"
  else fail "--dump-grads at -np ${grid#* } vs t = 1: $said"; fi
done

# 4. Checkpoints are the same at any cp: cp 2's step-20 file resumes at t = 1, and t = 1's at
# cp 4, each on the uninterrupted t = 1 curve (its steps 21-24).
cp_resume() {  # cp_resume NAME NP FILE ARGS...
  local name=$1 np=$2 file=$3; shift 3
  run_mpi "$np" "${train[@]}" --steps 4 --load "$file" --log-json "$tmp/cp_$name.json" "$@" \
    >"$logs/cp_$name.log" 2>&1 || fail "tp_train --load $file $* at -np $np exited non-zero (see $logs/cp_$name.log)"
  same_curve "$name: steps 21-24 vs the uninterrupted t = 1 run" "$tmp/cp_t1.json" "$tmp/cp_$name.json" 20
}
cp_resume "cp 2 checkpoint resumed at t = 1" 1 "$tmp/cp_cp2_at20.safetensors"
run_mpi 1 "${train[@]}" --steps 20 --save "$tmp/cp_t1_at20.safetensors" >"$logs/cp_t1_at20.log" 2>&1 ||
  fail "tp_train -np 1 --steps 20 --save exited non-zero (see $logs/cp_t1_at20.log)"
cp_resume "t = 1 checkpoint resumed at cp 4" 4 "$tmp/cp_t1_at20.safetensors" --cp 4
