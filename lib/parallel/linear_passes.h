// linear_passes.h — the plain passes of the parallel linears as functions of one rank's shards:
// what RowParallelLinear computes when no overlap mode is on, written once, so that exercise 03
// (exercises/03_row_parallel_forward.cpp) asks for exactly this and nothing of the overlap modes.
//
// Shape legend: N = rows (tokens), in/t = this rank's rows of A, out = the output size,
// t = comm.size(); under sequence parallelism N = s·b and the output keeps this rank's s/t.
#pragma once

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"

namespace tp {

/// The row-parallel forward: Y = Σ_r X_r A_r + b, A = [A_0; …; A_{t−1}] split along its rows.
/// This rank's GEMM X_r A_r is a full-shape partial sum; g's all-reduce sums them (under sequence
/// parallelism a reduce-scatter, which also keeps this rank's block of the sequence); the bias,
/// replicated, is added once, after the sum.
/// x_r: (N, in/t), a_r: (in/t, out), bias: (out) or null → (N, out), or (N/t, out) under SP.
Tensor row_parallel_forward(Device& device, Communicator& comm, const Tensor& x_r,
                            const Tensor& a_r, const Tensor* bias, bool sequence_parallel);

}  // namespace tp
