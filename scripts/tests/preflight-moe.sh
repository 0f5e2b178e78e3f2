# preflight-moe.sh — tp_preflight plans experts on a pipeline (--experts with --pp, issue 43 item 5;
# lib/model/preflight_moe.h): each stage's MoE blocks and one rank's model states, the fullest
# stage's rows, the all-to-all of the busiest stage. Mixtral-8x7B at t = 8, pp 2 on 8 x 8 GPUs
# leaves dp = 4, so --ep 8 is refused (one line) and --ep 4 planned; on 16 nodes --ep 8 fits.
# --cp with experts stays refused. Sourced by run-tests.sh (section 8b).
mx=("$BUILD/bin/tp_preflight" --model mixtral-8x7b -t 8 --gpus-per-node 8 --pp 2)
expect "tp_preflight: Mixtral pp 2 ep 4 on 8 x 8, stage 0" 0 \
  "stage 0  blocks [0, 16)     16 MoE  today P    22.79B  total 410.18 GB  --ep 4 P     5.87B  total 105.72 GB" 1 \
  "${mx[@]}" --nodes 8 --ep 4
expect "tp_preflight: Mixtral pp 2 ep 8 on 8 x 8 leaves dp 4" 2 "--ep=8 does not divide dp=4" 1 \
  "${mx[@]}" --nodes 8 --ep 8
expect "tp_preflight: Mixtral pp 2 ep 8 on 16 x 8 fits" 0 \
  "the model states alone against --gpu-memory 80.00 GB: do not fit at t = 8, fit with --ep 8" 1 \
  "${mx[@]}" --nodes 16 --ep 8
expect "tp_preflight: Mixtral pp 2, every other block MoE" 0 \
  "12.00 GiB per step for 8 MoE layers (the busiest stage's)" 1 \
  "${mx[@]}" --nodes 8 --ep 4 --moe-every 2
expect "tp_preflight: a stage without MoE blocks" 0 "stage 1  blocks [2, 3)       0 MoE" 1 \
  "$BUILD/bin/tp_preflight" --experts 4 --layers 3 --moe-every 2 --pp 2
expect "tp_preflight: --experts with --cp" 2 \
  "--experts with --cp: the preflight does not plan experts beside context parallelism yet" 1 \
  "${mx[@]}" --nodes 8 --ep 4 --cp 2
