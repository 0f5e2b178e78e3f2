# pp-features.sh — what the pipeline trainer (--pp) does that it refused before (sourced by
# scripts/run-tests.sh, section 8b): --export-hf, every stage's weights gathered to the first stage;
# --eval-every, the held-out batches forward through the stages; --dump-grads, every stage's
# gradients gathered to the first stage.
#
# --export-hf: the same weights give the same file, byte for byte:
#   1. against the t = 1 run: a t = 1 run trains 4 steps, saves and exports; --pp runs --load its
#      checkpoint with --steps 0 (the weights as loaded) and export: pp 2 (the tied wte, on the
#      first and last stage, written once), tp 2 × pp 2, pp 4 (--layers 4, one block a stage), and
#      pp 2 with --export-dtype bf16; untied (lm_head on the last stage) from the initial weights;
#   2. trained at the grid: a --pp run's export after 4 steps equals tp_export of the checkpoint
#      the same run saved (the global file pipeline.sh resumes at other grids): tp 2 × pp 2, and
#      pp 2 × dp 2 (only DP replica 0 exports).
same_export() {  # same_export NAME DIR_A DIR_B: model.safetensors and config.json identical
  if [ -s "$2/model.safetensors" ] && cmp -s "$2/model.safetensors" "$3/model.safetensors" &&
     cmp -s "$2/config.json" "$3/config.json"; then
    pass 1; echo "✓ $1: the same model.safetensors ($(wc -c <"$2/model.safetensors") bytes) and config.json"
  else fail "$1: the exports $2 and $3 differ (or one is missing)"; fi
}
ppx_run() {  # ppx_run NAME NP ARGS...: tp_train ARGS at -np NP, exporting to $tmp/ppx_NAME
  local name=$1 np=$2; shift 2
  rm -rf "$tmp/ppx_$name"
  run_mpi "$np" "${train[@]}" --export-hf "$tmp/ppx_$name" "$@" >"$logs/ppx_$name.log" 2>&1 ||
    fail "tp_train $* --export-hf at -np $np exited non-zero (see $logs/ppx_$name.log)"
}
# 1. The same weights as a t = 1 run.
ppx_run t1 1 --steps 4 --save "$tmp/ppx_t1.safetensors"
ppx_run pp2 2 --steps 0 --load "$tmp/ppx_t1.safetensors" --pp 2
same_export "--export-hf of loaded weights, pp 2 vs t = 1" "$tmp/ppx_t1" "$tmp/ppx_pp2"
ppx_run tp2pp2 4 --steps 0 --load "$tmp/ppx_t1.safetensors" --pp 2
same_export "--export-hf of loaded weights, tp 2 × pp 2 vs t = 1" "$tmp/ppx_t1" "$tmp/ppx_tp2pp2"
ppx_run t1_bf16 1 --steps 0 --load "$tmp/ppx_t1.safetensors" --export-dtype bf16
ppx_run pp2_bf16 2 --steps 0 --load "$tmp/ppx_t1.safetensors" --pp 2 --export-dtype bf16
same_export "--export-hf --export-dtype bf16 of loaded weights, pp 2 vs t = 1" "$tmp/ppx_t1_bf16" "$tmp/ppx_pp2_bf16"
ppx_run t1_L4 1 --steps 0 --layers 4
ppx_run pp4_L4 4 --steps 0 --layers 4 --pp 4
same_export "--export-hf of the initial weights, pp 4 (--layers 4) vs t = 1" "$tmp/ppx_t1_L4" "$tmp/ppx_pp4_L4"
ppx_run t1_untied 1 --steps 0 --untie
ppx_run pp2_untied 2 --steps 0 --untie --pp 2
same_export "--export-hf of the initial weights, pp 2 untied vs t = 1 untied" "$tmp/ppx_t1_untied" "$tmp/ppx_pp2_untied"
# 2. Trained at the grid, against tp_export of the run's own checkpoint.
for grid in "tp2pp2_trained 4 --pp 2 --schedule 1f1b --micro-batches 2" "pp2dp2_trained 4 --pp 2 --dp 2"; do
  set -- $grid
  name=$1; shift
  ppx_run "$name" "$@" --steps 4 --save "$tmp/ppx_$name.safetensors"
  rm -rf "$tmp/ppx_${name}_tp_export"
  run_mpi 1 "$BUILD/bin/tp_export" --load "$tmp/ppx_$name.safetensors" --hf "$tmp/ppx_${name}_tp_export" \
    >"$logs/ppx_${name}_tp_export.log" 2>&1 ||
    fail "tp_export of $tmp/ppx_$name.safetensors exited non-zero (see $logs/ppx_${name}_tp_export.log)"
  same_export "--export-hf after 4 steps at -np ${grid#* } vs tp_export of its checkpoint" \
    "$tmp/ppx_$name" "$tmp/ppx_${name}_tp_export"
done

# 3. --eval-every: from the t = 1 run's checkpoint, 6 more steps with an evaluation every 3 (and at
#    the last): the held-out losses of pp 2, tp 2 × pp 2 (1F1B, m 2) and pp 2 × dp 2 equal t = 1's
#    within 1e-6 relative (the stages run the same forward; only the training steps between the
#    evaluations add in another order: measured ≤ 6.6e-8), and tp 2 × pp 2 with --sp.
same_val() {  # same_val NAME A.json B.json: the same number of val_loss values, each within 1e-6
  local worst
  worst=$(paste <(grep -o '"val_loss": [^,}]*' "$2" | cut -d' ' -f2) <(grep -o '"val_loss": [^,}]*' "$3" | cut -d' ' -f2) |
          awk 'NF == 2 { d = ($1 - $2) / $2; if (d < 0) d = -d; if (d > w) w = d; n++ }
               NF != 2 { bad = 1 } END { if (bad || n < 3) print "missing"; else printf "%.2g", w }')
  if [ "$worst" != missing ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-6) }'; then
    pass 1; echo "✓ $1: $(grep -c '"val_loss"' "$3") held-out losses, worst relative difference $worst"
  else fail "$1: held-out losses differ (worst relative difference: $worst; $2 vs $3)"; fi
}
ppe_run() {  # ppe_run NAME NP ARGS...: 6 steps from the t = 1 checkpoint, --eval-every 3
  local name=$1 np=$2; shift 2
  rm -f "$tmp/ppe_$name.json"
  run_mpi "$np" "${train[@]}" --steps 6 --load "$tmp/ppx_t1.safetensors" --eval-every 3 \
    --log-json "$tmp/ppe_$name.json" "$@" >"$logs/ppe_$name.log" 2>&1 ||
    fail "tp_train $* --eval-every 3 at -np $np exited non-zero (see $logs/ppe_$name.log)"
}
ppe_run t1 1
ppe_run pp2 2 --pp 2
same_val "--eval-every, pp 2 vs t = 1" "$tmp/ppe_t1.json" "$tmp/ppe_pp2.json"
ppe_run tp2pp2 4 --pp 2 --schedule 1f1b --micro-batches 2
same_val "--eval-every, tp 2 × pp 2 (1f1b, m 2) vs t = 1" "$tmp/ppe_t1.json" "$tmp/ppe_tp2pp2.json"
ppe_run pp2dp2 4 --pp 2 --dp 2
same_val "--eval-every, pp 2 × dp 2 vs t = 1" "$tmp/ppe_t1.json" "$tmp/ppe_pp2dp2.json"
ppe_run tp2pp2_sp 4 --pp 2 --sp
same_val "--eval-every, tp 2 × pp 2 --sp vs t = 1" "$tmp/ppe_t1.json" "$tmp/ppe_tp2pp2_sp.json"

# 4. --dump-grads: the first step's gradients from the t = 1 run's checkpoint, pp 2, tp 2 × pp 2
#    (1f1b, m 2) and pp 2 × dp 2 against t = 1, pp 2 untied against t = 1 untied (from the initial
#    weights): the batch bitwise, the loss and every gradient within 1e-5 relative (test_pipeline's
#    gradient tolerance; measured ≤ 3.5e-7), one file with every tensor (the tied wte once).
ppg_run() {  # ppg_run NAME NP ARGS...: one step, --dump-grads $tmp/ppg_NAME.safetensors
  local name=$1 np=$2; shift 2
  rm -f "$tmp/ppg_$name.safetensors"
  run_mpi "$np" "${train[@]}" --steps 1 --dump-grads "$tmp/ppg_$name.safetensors" "$@" \
    >"$logs/ppg_$name.log" 2>&1 ||
    fail "tp_train $* --dump-grads at -np $np exited non-zero (see $logs/ppg_$name.log)"
}
same_grads() {  # same_grads NAME A B
  local said
  if said=$(python3 scripts/tests/grads_close.py "$2" "$3" 1e-5 2>&1); then
    pass 1; echo "✓ $1: $said"
  else fail "$1: $said"; fi
}
ppg_run t1 1 --load "$tmp/ppx_t1.safetensors"
for grid in "pp2 2 --pp 2" "tp2pp2 4 --pp 2 --schedule 1f1b --micro-batches 2" "pp2dp2 4 --pp 2 --dp 2"; do
  set -- $grid
  name=$1; shift
  ppg_run "$name" "$@" --load "$tmp/ppx_t1.safetensors"
  same_grads "--dump-grads at -np ${grid#* } vs t = 1" "$tmp/ppg_t1.safetensors" "$tmp/ppg_$name.safetensors"
done
ppg_run t1_untied 1 --untie
ppg_run pp2_untied 2 --untie --pp 2
same_grads "--dump-grads at pp 2 untied vs t = 1 untied" "$tmp/ppg_t1_untied.safetensors" "$tmp/ppg_pp2_untied.safetensors"
