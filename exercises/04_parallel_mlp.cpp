// Exercise 04 — the parallel MLP's wiring: which collective where (lesson 04).
//
// Y = GeLU(X U) B, U split by columns (fc1_, column-parallel), B by rows (fc2_, row-parallel):
// rank r computes GeLU(X U_r) B_r, a partial sum of Y, with no communication between the two
// GEMMs, because GeLU is elementwise and U_r's columns are whole. The layers hold the collectives:
// fc1_ sits after f (backward: all-reduce), fc2_ ends in g (forward: all-reduce). SwiGLU adds a
// second column-parallel layer, gate_: silu(X G_r) ⊙ X U_r, also local.
// Write forward and backward. Shapes: x_in (N, h) → up (N, ffn/t) → act (N, ffn/t) → (N, h).
// Hint: forward: outs = swiglu_ ? ColumnParallelLinear::forward_shared({&fc1_, &gate_}, x_in)
// : {fc1_.forward(x_in)}; keep what backward needs with saved_.keep(up_, outs[0]) (and gate_out_);
// the activation: device_.swiglu_forward / bias_gelu_forward (when fused_bias_gelu_, with
// fc1_.compute_bias()) / gelu_forward; then fc2_.forward(act). Backward mirrors it: fc2_.backward,
// the activation's backward (swiglu_backward / bias_gelu_backward into fc1_.dbias / gelu_backward),
// then ColumnParallelLinear::backward_shared({&fc1_, &gate_}, {dup, dgate}) or fc1_.backward(dup).
// Call fc1_.prefetch_input() first in backward (sequence parallelism's overlap uses it).
//
// solution: lib/model/mlp.cpp
// grader: lesson_04_parallel_mlp 2
// if it fails: Y is a partial sum on each rank: the output must leave through fc2_ (g's all-reduce).
// if it fails: Y differs by about a factor of t: is an extra all-reduce summing Y twice?
// if it fails: dX differs: the activation's backward needs the forward's up (saved_.keep), not dY.
#include "core/exercise.h"
#include "model/mlp.h"

namespace tp {

// x_in (N, h) → (N, h), the sum over the ranks
Tensor ParallelMLP::forward(const Tensor& x_in) {
  TP_EXERCISE_TODO("exercises/04_parallel_mlp.cpp");
}

// dy (N, h) → dx (N, h); adds to fc1_, gate_ and fc2_'s weight gradients
Tensor ParallelMLP::backward(const Tensor& dy) {
  TP_EXERCISE_TODO("exercises/04_parallel_mlp.cpp");
}

}  // namespace tp
