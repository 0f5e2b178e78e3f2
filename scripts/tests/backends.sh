# backends.sh — the backend registry (launcher/backends.cpp): the flags' checks that come from its
# tables. Sourced by scripts/run-tests.sh (section 8b).
expect "--comm nccl with the CPU backend" 2 "--comm nccl needs --backend gpu" 2 \
  "$BUILD/bin/lesson_01_block_matmul" --comm nccl
expect "--backend: a name the registry lacks" 2 "--backend=tpu" 2 \
  "$BUILD/bin/lesson_01_block_matmul" --backend tpu
expect "--comm: a name the registry lacks" 2 "--comm=gloo" 2 \
  "$BUILD/bin/lesson_01_block_matmul" --comm gloo
