// collective_matmul.h — hiding tensor-parallel communication behind the GEMMs that need it.
//
// A TP layer's collectives sit between GEMMs: f's all-reduce of dX after the input-gradient GEMM,
// the sequence-parallel all-gather in front of a column-parallel GEMM and the reduce-scatter behind
// a row-parallel one. Two ways to let the wire work while the cores compute (Overlap):
//
//   async   Start the collective, compute what does not need its result, then wait. In backward,
//           dX = Σ_r dY_r A_rᵀ is all-reduced (SP: reduce-scatter) while dA_r = Xᵀ dY_r is computed
//           (Megatron-LM's asynchronous gradient all-reduce), and under SP the re-gather of the
//           saved input shard starts when backward enters the region, ahead of the dY GEMMs.
//   ring    Collective matmul (SP only): the all-gather + GEMM and the GEMM + reduce-scatter are
//           decomposed into t blocks of rows passed around the ring with send/recv, each block's
//           GEMM running while the next block travels:
//
//             all-gather + GEMM    Y = [X_0; …; X_{t−1}] A  =  [X_0 A; …; X_{t−1} A]: at step s rank
//                                  r multiplies the block it holds, X_{(r−s) mod t}, and passes it
//                                  on to r + 1 meanwhile;
//             GEMM + reduce-scatter  Y_r = Σ_q (X_q A_q)[block r]: the running sum for block d starts
//                                  at rank d + 1 and travels the ring, each rank adding its own
//                                  block-d product, which it computes while the previous sum
//                                  travels; it ends at rank d after t − 1 hops.
//
//           The column-parallel backward runs both rings at once (ring_gather_each_reduce_scatter):
//           dX is computed whole while X's first block travels, its blocks reduce-scattered while X's
//           blocks arrive for the dA terms (at t = 2: X received into one buffer and dA = Xᵀ dY one
//           GEMM over all rows, under the reduce-scatter). A BLAS packs a GEMM's whole weight on
//           every call, so t GEMMs of N/t rows would cost t packs where one GEMM costs one: the
//           blocks of the other rings (forward, and the row-parallel backward's dX) run through
//           Device::pack_gemm_b / gemm_packed instead, the weight packed once per ring for its t
//           blocks (the CPU: oneDNN's f32 matmul on a weight reordered once into its own layout,
//           where oneDNN has a brgemm kernel; lib/parallel/linear.cpp, cpu_backend/onednn_gemm.h).
//
//           This is the decomposition of Wang et al., "Overlap Communication with Dependent
//           Computation via Decomposition in Large Deep Learning Models" (ASPLOS 2023), which
//           Megatron-LM / Transformer Engine implement with userbuffers ("tp_comm_overlap") and
//           PyTorch as async TP (torch.distributed._symmetric_memory, "micro-pipeline TP").
//
//   chunked Plain TP (no SP): the GEMM in front of an all-reduce is cut into row blocks, and each
//           block's all-reduce starts as soon as the block exists, flying under the next block's
//           GEMM. Forward: the row-parallel Σ_r X_r A_r (g's all-reduce); backward: the
//           column-parallel dX = Σ_r dY_r A_rᵀ (f's all-reduce), whose last block flies under the
//           dA GEMMs as in async. One block's collective is on the wire at a time (block k's
//           is waited for before block k + 1's starts), as on one link. A row of the product is
//           the same dot products whichever block it sits in, so no sum changes (but a BLAS may
//           pick its kernel by the block's size and round differently: see below).
//
// Every mode gives the numbers of `none` (the same products): bitwise for async, which only
// reorders independent GEMMs, and for chunked where the GEMM rounds a row the same whatever the
// block's size (OpenBLAS at the lesson's sizes, not its small-matrix kernels) and the all-reduce
// adds a block's elements in the order it adds the whole's (always at t ≤ 2; MPICH at t ≤ 4);
// test_overlap checks the first and states the bound where it fails. For ring, the weight
// gradients' k-sums are split into t blocks (column-parallel at t > 2, row-parallel at every
// t > 1), the reduce-scatter adds in ring order and the blocks' GEMMs on a packed weight may sum
// in another order than the BLAS, so results agree to float rounding (tests state the bound).
//
// Shape legend: N = tokens (rows, sequence-major), t = comm.size(), r = comm.rank(); a block is
// N/t consecutive rows, block r = this rank's sequence shard.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <functional>
#include <string>

#include "core/communicator.h"
#include "core/tensor.h"
#include "parallel/mappings.h"

namespace tp {

/// How the TP layers overlap their collectives with compute (see above).
enum class Overlap { None, Async, Ring, Chunked };

/// "none", "async", "ring" or "chunked" → Overlap; anything else is a bad-input error naming the choices.
Overlap parse_overlap(const std::string& name);
/// The name parse_overlap takes.
const char* overlap_name(Overlap overlap);

/// Ring all-gather with work on each block as it arrives: calls f(c, X_c) once for every block c
/// of X = [X_0; …; X_{t−1}] (dim 0), starting with X_r = local; while f works on one block the next
/// one travels (send_recv_async to r + 1, from r − 1). t − 1 send-recv steps of one block each.
/// local: (N/t, …); f must not keep the block tensor past its call.
void ring_all_gather_each(Communicator& comm, const Tensor& local,
                          const std::function<void(int block, const Tensor& x_block)>& f);

/// Ring reduce-scatter of blocks computed on demand: returns Σ_q P_q(r), the sum over the ranks of
/// each rank's block r, where partial(d) returns this rank's block d (a new tensor, same shape for
/// every d). Each partial is computed while the previous running sum travels. t − 1 send-recv steps.
Tensor ring_reduce_scatter(Communicator& comm, const std::function<Tensor(int block)>& partial);

/// The two rings of a column-parallel layer's backward under SP, sharing their steps: X's blocks
/// come around (all-gather) while the blocks of P = [P_0; …; P_{t−1}], this rank's partial sums of
/// every block, are reduce-scattered. whole() computes P (N rows, dim 0) under the first block's
/// transfer; f(c, X_c) runs once for every block c of X as in ring_all_gather_each, starting with
/// X_r = local, each call under the next blocks' transfers. Returns Σ_q P_q[block r], a new tensor.
/// What it saves against ring_all_gather_each + ring_reduce_scatter: P is one GEMM per weight over
/// all rows instead of t GEMMs of N/t rows, each of which packs the whole weight again (a BLAS's
/// fixed cost per call). t − 1 send-recv steps of each ring; at t > 2 one step of each is in flight
/// at a time. x_whole, if defined, is a (t·n, …) buffer that X's blocks are received into (views,
/// no copy; the local block is copied into block r): f's blocks are then its views, and once the
/// last f has begun it holds all of X, so that f may compute over all rows at its last call (the
/// column-parallel backward at t = 2: dA = Xᵀ dY once, under the reduce-scatter).
Tensor ring_gather_each_reduce_scatter(
    Communicator& comm, const Tensor& local, const std::function<Tensor()>& whole,
    const std::function<void(int block, const Tensor& x_block)>& f, const Tensor& x_whole = {});

/// The row blocks chunked overlap cuts a GEMM of `rows` rows into: kChunkedBlocks of them (fewer
/// when there are fewer rows), as equal as the rows allow.
constexpr int kChunkedBlocks = 4;

/// Chunked all-reduce (Overlap::Chunked) of a product made block by block: for each row block
/// [r0, r1) of the product (rows in all), compute(r0, r1) fills that block and returns it (a
/// view), start(block) starts its collective; block k's collective flies under block k + 1's
/// compute and is waited for before block k + 1's starts (one on the wire at a time). tail, if
/// given, runs while the last block's collective flies. Returns when every block is reduced.
void chunked_reduce_each(int64_t rows, const std::function<Tensor(int64_t r0, int64_t r1)>& compute,
                         const std::function<Pending(const Tensor& block)>& start,
                         const std::function<void()>& tail = {});

}  // namespace tp
