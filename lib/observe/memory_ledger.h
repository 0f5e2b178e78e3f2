// memory_ledger.h — every tensor a forward pass keeps for backward, with its size and layer.
//
// Layers keep tensors through an ActivationStash (activation_stash.h), which calls save() for each
// one; a tensor kept by several layers (the input that q, k and v share) is counted once. The per-layer sum is what activation memory costs, and
// the model checks it against a closed-form formula (lib/model/memory.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tp {

class SavedTensor;  // observe/activation_stash.h

struct MemoryRecord {
  std::string name;  ///< "h.0.attn.probs"
  Shape shape;       ///< this rank's shape
  int64_t bytes = 0;
  int64_t layer = -1;        ///< block index; -1 outside the blocks (embedding, final norm, head)
  Dtype dtype = Dtype::f32;  ///< how it is stored: bf16 activations under --precision bf16
};

/// What one forward kept, moved out of the layers' slots (MemoryLedger::take): pipeline
/// parallelism keeps several micro-batches in flight on one stage, each one such stash.
struct KeptActivations {
  std::vector<MemoryRecord> records;
  std::vector<Tensor> kept;
  std::vector<std::pair<SavedTensor*, Tensor>> values;  // each slot and the tensor it held
  int64_t bytes() const;
};

class MemoryLedger {
 public:
  /// Records `t` as kept for backward (once per storage address; later saves of it are ignored).
  /// `slot`, when given, is the SavedTensor holding it, emptied by release().
  void save(const std::string& name, int64_t layer, const Tensor& t, SavedTensor* slot = nullptr);
  /// Forgets everything (called at the start of each forward pass).
  void clear() {
    records_.clear();
    kept_.clear();
    slots_.clear();
  }
  /// Empties every SavedTensor recorded since the last clear() and forgets them: the memory is
  /// freed (a block under full recomputation after its backward).
  void release();
  /// Moves every tensor recorded since the last clear() out of its slot (the slots are empty
  /// afterwards, as after release()) and the records with them; the ledger is clear.
  KeptActivations take();
  /// Puts what take() moved out back into the slots and the records (after clear()).
  void restore(KeptActivations kept);
  /// While false, an ActivationStash attached to this ledger keeps nothing and records nothing
  /// (full recomputation's first forward, model/recompute.h: the block reruns it in backward).
  void set_keeping(bool keeping) { keeping_ = keeping; }
  bool keeping() const { return keeping_; }
  const std::vector<MemoryRecord>& records() const { return records_; }
  /// Bytes kept by block `layer`.
  int64_t layer_bytes(int64_t layer) const;
  /// Bytes kept by block `layer` in tensors of `dtype` (bf16 activations, f32 statistics and
  /// masks under --precision bf16).
  int64_t layer_bytes(int64_t layer, Dtype dtype) const;
  /// Bytes kept in all.
  int64_t total_bytes() const;

 private:
  std::vector<MemoryRecord> records_;
  // The saved tensors themselves, so no address is reused while recorded.
  std::vector<Tensor> kept_;
  std::vector<SavedTensor*> slots_;
  bool keeping_ = true;
};

}  // namespace tp
