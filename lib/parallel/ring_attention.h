// ring_attention.h — causal attention over a sequence split by context parallelism: the keys and
// values travel around the CP group, and each rank's partial outputs merge by their log-sum-exps.
//
// Each of the cp ranks holds its chunks of every sequence (parallel/context_parallel.h): the
// queries, keys and values of its own positions, (S/cp · B, ·). The ranks stand in a ring; at
// step i (0 … cp − 1) rank r holds the keys and values of rank (r − i) mod cp:
//
//   forward, step i:  start sending the held K, V block to r + 1 and receiving the next from
//                     r − 1; for every (my query chunk, held key chunk) pair that is not Skipped
//                     (context_parallel.h's classify_pair), attention on the pair
//                     (Device::attention_forward with kv_seq and past) gives a partial output and
//                     its log-sum-exp, merged into the chunk's running ones (attention_merge);
//                     wait for the next block.
//
// After cp steps every query has met every key at or before it: out and lse are one device's.
// The merge is the online softmax's: with L = log(e^lse₁ + e^lse₂),
// out = e^(lse₁ − L)·out₁ + e^(lse₂ − L)·out₂ — each partial softmax was normalised over its own
// keys only, and the exponentials put them on the common denominator.
//
//   backward, step i: the held K, V block comes with its dK, dV accumulators (zero at its home
//                     rank). For every pair, Device::attention_backward from the merged out and
//                     lse of the query chunk (P and the row sum D need the softmax over all keys)
//                     adds to this rank's dQ and to the travelling dK, dV; then K, V go on to
//                     r + 1 (cp − 1 times) and dK, dV too (cp times: the last hop takes them
//                     home, where they are this rank's dk, dv). Both passes overlap the next
//                     step's compute: a step computes its dK, dV part apart and adds it to the
//                     travelling sums once they have arrived.
//
// Bytes each rank sends per attention call, with e bytes per element and kv = (S/cp)·B·nkv·hd:
// forward 2·kv·e·(cp − 1); backward 2·kv·e·(cp − 1) for K, V and 2·kv·e·cp for dK, dV. Grouped-
// query attention sends only the key/value heads (nkv of them, under TP nkv/t). The ledger labels
// them "ring attention kv" and "ring attention dkv".
//
// Shape legend: n = S/cp local positions, B = batch, nh / nkv = query / key-value heads on this
// rank (under TP nh/t, nkv/t), hd = head dim, cp = CP size, c = a chunk's positions.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "parallel/context_parallel.h"

namespace tp {

/// One (query chunk, key chunk) pair of a ring step, for an observer (the lesson prints them).
struct RingPair {
  int step = 0;      ///< ring step i
  int source = 0;    ///< the CP rank whose keys and values are held: (r − i) mod cp
  int q_chunk = 0;   ///< index into this rank's chunks
  int kv_chunk = 0;  ///< index into the source rank's chunks
  CpChunk q, kv;     ///< the two chunks' positions
  ChunkPair kind = ChunkPair::Full;
  /// Forward only, for a computed pair: its partial output (c·B, nh·hd) and log-sum-exp
  /// (B, nh, c) before the merge; and the chunk's running ones after it (views of the output:
  /// read them in the observer, later merges overwrite them).
  Tensor partial_out, partial_lse, merged_out, merged_lse;
};

using RingPairObserver = std::function<void(const RingPair&)>;

class RingAttention {
 public:
  /// cp: the CP group (size 1: plain attention, no ring). seq: the whole sequence S.
  RingAttention(Device& device, Communicator& cp, int64_t seq, CpLayout layout);

  /// lse's shape for a local call: (chunks·B, nh, c) — chunk i's (B, nh, c) log-sum-exps are rows
  /// [i·B, (i + 1)·B). With cp = 1, (B, nh, S), attention_forward's.
  Shape lse_shape(int64_t batch, int64_t heads) const;

  /// q: (n·B, nh·hd), k, v: (n·B, nkv·hd) of this rank's positions; out: like q; lse: lse_shape.
  /// shape: the local call's heads, head_dim, scale and batch (seq is set here).
  void forward(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
               const AttentionShape& shape);
  /// dq, dk, dv (=) like q, k, v; out and lse are forward's.
  void backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dout, const Tensor& q,
                const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                const AttentionShape& shape);

  /// Called for every pair of every forward step (Skipped ones too, with no tensors).
  void set_observer(RingPairObserver observer) { observer_ = std::move(observer); }
  /// Testing, for every RingAttention of the process from now on: merge by adding the partial
  /// outputs without their log-sum-exp weights (a broken ring; the equality tests must catch it).
  static void set_broken_merge_for_test(bool on) { broken_merge_ = on; }

  int cp() const { return cp_.size(); }
  const std::vector<CpChunk>& chunks() const { return mine_; }
  /// Pairs computed by the last forward: Full and Diagonal counts.
  int64_t full_pairs() const { return full_pairs_; }
  int64_t diagonal_pairs() const { return diagonal_pairs_; }

 private:
  Device& device_;
  Communicator& cp_;
  int64_t seq_;
  CpLayout layout_;
  std::vector<CpChunk> mine_;
  RingPairObserver observer_;
  static inline bool broken_merge_ = false;
  int64_t full_pairs_ = 0, diagonal_pairs_ = 0;
};

}  // namespace tp
