# layout.sh — tp_preflight --pp: the pipeline preflight's bad input and its worked numbers (sourced
# by scripts/run-tests.sh, section 8b; lib/model/pipeline_plan.h has the formulas).
#
# Bad input: one line each, exit 2, within 10 s: more stages than blocks, 1F1B with fewer
# micro-batches than stages, a schedule that does not exist, a batch that does not split into
# dp × m micro-batches, more GPUs than the job has. Then the articles' 70B layout (tp 8 inside
# each node of 8 GPUs, pp 4 and dp 2 across): the bubble 3/11 and InfiniBand for PP and DP.
pf=("$BUILD/bin/tp_preflight")
expect "tp_preflight --pp: more stages than blocks" 2 \
  "--pp=3 is more stages than the model's 2 blocks (each stage holds at least one); choose --pp <= 2" 1 \
  "${pf[@]}" --layers 2 --pp 3 --micro-batches 4
expect "tp_preflight --pp: 1F1B with m < N" 2 \
  "--micro-batches=2 < --pp=4: 1F1B fills the pipeline with N = 4 micro-batches" 1 \
  "${pf[@]}" --layers 4 --pp 4 --micro-batches 2 --schedule 1f1b
expect "tp_preflight --pp: AFAB accepts m < N" 0 "bubble (N - 1)/(m + N - 1) = 3/5" 1 \
  "${pf[@]}" --layers 4 --pp 4 --micro-batches 2 --schedule afab
expect "tp_preflight --pp: an unknown schedule" 2 "--schedule=gpipe: expected one of afab, 1f1b" 1 \
  "${pf[@]}" --pp 2 --micro-batches 2 --schedule gpipe
expect "tp_preflight --pp: a batch that does not split" 2 \
  "--batch=8 does not split into --dp x --micro-batches = 3 x 2 = 6 micro-batches" 1 \
  "${pf[@]}" --pp 2 --dp 3 --micro-batches 2
expect "tp_preflight --pp: more GPUs than the job" 2 \
  "tp x pp x dp = 8 x 4 x 4 = 128 GPUs, but the job has 8 nodes x 8 GPUs = 64" 1 \
  "${pf[@]}" --model llama2-70b -t 8 --pp 4 --dp 4 --micro-batches 8 --batch 32 --nodes 8 --gpus-per-node 8
l70=(--model llama2-70b -t 8 --pp 4 --schedule 1f1b --dp 2 --micro-batches 8 --batch 16 --nodes 8 --gpus-per-node 8)
expect "tp_preflight --pp: 70B bubble on 8 x 8 GPUs" 0 "bubble (N - 1)/(m + N - 1) = 3/11 = 27.3 %" 1 \
  "${pf[@]}" "${l70[@]}"
expect "tp_preflight --pp: 70B links on 8 x 8 GPUs" 0 \
  "TP (inside a node, nvlink), PP send/recv (across nodes, ib), DP all-reduce (across nodes, ib)" 1 \
  "${pf[@]}" "${l70[@]}"
# Lesson 16 launched on one node (plain mpirun): one line with the two-host launch, exit 2.
expect "lesson 16 on one node" 2 \
  "lesson 16 runs on two nodes of 2 ranks; this launch has 1 node(s). On one machine with MPICH: mpirun -launcher fork" 4 \
  "$BUILD/bin/lesson_16_where_parallelism_goes"
