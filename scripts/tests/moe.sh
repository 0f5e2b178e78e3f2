# moe.sh — issue 43's mixture of experts on tp_train: --experts, --top-k, --moe-every,
# --aux-loss-coef, --z-loss-coef, --capacity-factor (sourced by scripts/run-tests.sh, section 8b).
#
# Bad input: one line each, exit 2, within 10 s. Then 20-step loss curves against t = 1 within 1e-4
# relative at every step (same_curve): tp 2, tp 4 with --sp (each rank routes its s/t tokens, the
# balancing statistics summed over the TP group), tp 2 × dp 2 (summed over DP: the global batch's
# balancing loss), tp 2 × cp 2, top-1 SwiGLU every other block with full recomputation; each
# progress line followed by the first MoE block's tokens per expert. A checkpoint saved at tp 2
# resumes at t = 1 on the uninterrupted curve; a dense model refuses it in one line. Expert
# parallelism (--ep): ep 2, ep 4, ep 2 inside dp 4, tp 2 × ep 2 on the t = 1 curve; a checkpoint
# saved at ep 2 resumes at t = 1 and at ep 4, and the tp 2 one at ep 2; its bad inputs. Micro-batches
# (the balancing statistics each global micro-batch's): pp 2 on t = 1's curve at --micro-batches 2;
# ep 2 × pp 2 on dp 2's (whose micro-batch k is both replicas' k-th part: one device runs other
# micro-batches), and its checkpoint resumed at dp 2 on dp 2's uninterrupted curve. bf16: ep 2 and
# tp 2 × ep 2 on t = 1's bf16 curve within 2e-3 (3.6e-4 and 4.8e-4 here). A capacity factor at
# ep 2 on dp 2's curve (the capacity per source rank) with drops counted.
moe=(--experts 4 --top-k 2)
expect "--top-k above --experts" 2 "--top-k=5 must be in [1, --experts=4]" 2 "${tt[@]}" --experts 4 --top-k 5
expect "--experts with --export-hf" 2 "--experts 4 (GPT-2 has no experts)" 1 "${tt[@]}" "${moe[@]}" --export-hf "$tmp/moe_hf"
expect "--experts not divisible by --ep" 2 "--experts=4 is not divisible by --ep=3" 3 "${tt[@]}" "${moe[@]}" --dp 3 --ep 3
expect "--ep not dividing --dp" 2 "ep must divide dp" 2 "${tt[@]}" "${moe[@]}" --dp 2 --ep 4
expect "--ep without --experts" 2 "--ep 2 without --experts" 2 "${tt[@]}" --dp 2 --ep 2
expect "--capacity-factor negative" 2 "--capacity-factor=-1: must be 0 or > 0" 1 "${tt[@]}" "${moe[@]}" --capacity-factor -1

rm -rf "$tmp"/moe_*.json "$tmp"/moe_*.safetensors "$tmp"/moe_zero_ck  # --log-json appends
moe_run() {  # moe_run NAME NP ARGS...: tp_train "${moe[@]}" ARGS → $tmp/moe_NAME.json
  local name=$1 np=$2; shift 2
  run_mpi "$np" "${train[@]}" "${moe[@]}" --log-json "$tmp/moe_${name// /_}.json" "$@" \
    >"$logs/moe_${name// /_}.log" 2>&1 || fail "tp_train ${moe[*]} $* at -np $np exited non-zero (see $logs/moe_${name// /_}.log)"
}
moe_run t1 1 --steps 24
for grid in "tp 2:2" "tp 4 sp:4 --sp" "tp 2 x dp 2:4 --dp 2" "tp 2 x cp 2:4 --cp 2"; do
  name=${grid%%:*}; set -- ${grid#*:}
  moe_run "$name" "$@" --steps 20 $([ "$name" = "tp 2" ] && echo "--save $tmp/moe_tp2_at20.safetensors")
  same_curve "20-step loss curve with --experts 4 --top-k 2, $name vs t = 1" "$tmp/moe_t1.json" "$tmp/moe_${name// /_}.json"
done
moe_run t1_k1 1 --steps 20 --top-k 1 --act swiglu --moe-every 2
moe_run "tp 2 k1" 2 --steps 20 --top-k 1 --act swiglu --moe-every 2 --recompute full
same_curve "20-step loss curve, top-1 SwiGLU every other block, full recomputation, tp 2 vs t = 1" \
  "$tmp/moe_t1_k1.json" "$tmp/moe_tp_2_k1.json"
if grep -q "moe: tokens per expert (first MoE block, of 128)" "$logs/moe_tp_2.log" 2>/dev/null; then
  pass 1; echo "✓ the MoE line: $(grep -m1 -o 'moe: .*' "$logs/moe_tp_2.log")"
else fail "no 'moe: tokens per expert' line (see $logs/moe_tp_2.log)"; fi
# The tp 2 checkpoint at step 20 resumes at t = 1 on the uninterrupted curve (steps 21-24).
run_mpi 1 "${train[@]}" "${moe[@]}" --steps 4 --load "$tmp/moe_tp2_at20.safetensors" --log-json "$tmp/moe_resumed.json" \
  >"$logs/moe_resumed.log" 2>&1 || fail "resuming the MoE checkpoint at t = 1 exited non-zero (see $logs/moe_resumed.log)"
same_curve "MoE checkpoint (tp 2) resumed at t = 1, steps 21-24" "$tmp/moe_t1.json" "$tmp/moe_resumed.json" 20
expect "a dense model loading an MoE checkpoint" 2 "it has no tensor transformer.h.0.mlp.c_fc.weight" 1 \
  "${ld[@]}" "$tmp/moe_tp2_at20.safetensors"

# Expert parallelism: the experts spread over the EP group, the tokens sent to them by all-to-all.
for grid in "ep 2:2 --dp 2 --ep 2" "ep 4:4 --dp 4 --ep 4" "dp 4 ep 2:4 --dp 4 --ep 2" "tp 2 x ep 2:4 --dp 2 --ep 2 --sp"; do
  name=${grid%%:*}; set -- ${grid#*:}
  moe_run "$name" "$@" --steps 20 $([ "$name" = "ep 2" ] && echo "--save $tmp/moe_ep2_at20.safetensors")
  same_curve "20-step loss curve with --experts 4 --top-k 2, $name vs t = 1" "$tmp/moe_t1.json" "$tmp/moe_${name// /_}.json"
done
for resume in "ep 2 file at t 1:1:ep2" "ep 2 file at ep 4:4 --dp 4 --ep 4:ep2" "tp 2 file at ep 2:2 --dp 2 --ep 2:tp2"; do
  name=${resume%%:*}; rest=${resume#*:}; file=${rest##*:}; set -- ${rest%:*}; np=$1; shift
  run_mpi "$np" "${train[@]}" "${moe[@]}" "$@" --steps 4 --load "$tmp/moe_${file}_at20.safetensors" \
    --log-json "$tmp/moe_resumed_${file}_$np.json" >"$logs/moe_resumed_${file}_$np.log" 2>&1 ||
    fail "resuming the MoE checkpoint ($name) exited non-zero (see $logs/moe_resumed_${file}_$np.log)"
  same_curve "MoE checkpoint, $name, steps 21-24" "$tmp/moe_t1.json" "$tmp/moe_resumed_${file}_$np.json" 20
done

# Micro-batches and pipeline stages.
moe_run t1_m2 1 --steps 20 --micro-batches 2
moe_run "pp 2" 2 --steps 20 --micro-batches 2 --pp 2 --schedule 1f1b
same_curve "20-step loss curve with --experts, pp 2 (1F1B, 2 micro-batches) vs t = 1" "$tmp/moe_t1_m2.json" "$tmp/moe_pp_2.json"
moe_run "dp 2 m2" 2 --steps 24 --micro-batches 2 --dp 2
moe_run "ep 2 x pp 2" 4 --steps 20 --micro-batches 2 --dp 2 --ep 2 --pp 2 --save "$tmp/moe_eppp_at20.safetensors"
same_curve "20-step loss curve with --experts, ep 2 x pp 2 vs dp 2 (2 micro-batches)" "$tmp/moe_dp_2_m2.json" "$tmp/moe_ep_2_x_pp_2.json"
run_mpi 2 "${train[@]}" "${moe[@]}" --dp 2 --micro-batches 2 --steps 4 --load "$tmp/moe_eppp_at20.safetensors" \
  --log-json "$tmp/moe_resumed_eppp.json" >"$logs/moe_resumed_eppp.log" 2>&1 ||
  fail "resuming the ep 2 x pp 2 MoE checkpoint at dp 2 exited non-zero (see $logs/moe_resumed_eppp.log)"
same_curve "MoE checkpoint (ep 2 x pp 2) resumed at dp 2, steps 21-24" "$tmp/moe_dp_2_m2.json" "$tmp/moe_resumed_eppp.json" 20

# ZeRO-1 under EP (the experts' moments over their EDP group): dp 4 ep 2 on t = 1's curve, saving
# every 10 steps (the moments gathered for the file and sharded again), the step-20 file resumed at
# t = 1 on the uninterrupted curve.
moe_run "dp 4 ep 2 zero" 4 --steps 20 --dp 4 --ep 2 --zero 1 --save "$tmp/moe_zero_ck/" --save-every 10
same_curve "20-step loss curve with --experts, dp 4 ep 2 --zero 1 vs t = 1" "$tmp/moe_t1.json" "$tmp/moe_dp_4_ep_2_zero.json"
zero_file=$(ls "$tmp"/moe_zero_ck/*20*.safetensors 2>/dev/null | head -1)
run_mpi 1 "${train[@]}" "${moe[@]}" --steps 4 --load "$zero_file" --log-json "$tmp/moe_resumed_zero.json" \
  >"$logs/moe_resumed_zero.log" 2>&1 || fail "resuming the ZeRO-1 EP checkpoint ($zero_file) at t = 1 exited non-zero (see $logs/moe_resumed_zero.log)"
same_curve "MoE checkpoint (dp 4 ep 2 --zero 1) resumed at t = 1, steps 21-24" "$tmp/moe_t1.json" "$tmp/moe_resumed_zero.json" 20

# A capacity factor under EP: the capacity stays per source rank, so ep 2 computes what dp 2 does.
moe_run "dp 2 cap" 2 --steps 20 --dp 2 --capacity-factor 1.0
moe_run "ep 2 cap" 2 --steps 20 --dp 2 --ep 2 --capacity-factor 1.0
same_curve "20-step loss curve with --capacity-factor 1.0, ep 2 vs dp 2" "$tmp/moe_dp_2_cap.json" "$tmp/moe_ep_2_cap.json"
if grep -q "dropped [1-9]" "$logs/moe_ep_2_cap.log"; then pass 1; echo "✓ ep 2 with --capacity-factor 1.0 drops: $(grep -m1 -o 'dropped [0-9]* (this rank)' "$logs/moe_ep_2_cap.log")"
else fail "no drops counted with --capacity-factor 1.0 at ep 2 (see $logs/moe_ep_2_cap.log)"; fi

# bf16 mixed precision (the experts on bf16 copies, the router in f32).
moe_run t1_bf16 1 --steps 20 --precision bf16
for grid in "ep 2 bf16:2 --dp 2 --ep 2" "tp 2 x ep 2 bf16:4 --dp 2 --ep 2 --sp"; do
  name=${grid%%:*}; set -- ${grid#*:}
  moe_run "$name" "$@" --steps 20 --precision bf16
  TOL=2e-3 same_curve "20-step bf16 loss curve with --experts, $name vs t = 1" "$tmp/moe_t1_bf16.json" "$tmp/moe_${name// /_}.json"
done
