// activation_stash.h — how a layer keeps tensors from forward for backward, accounted as it keeps
// them.
//
// A layer declares one SavedTensor per tensor its backward reads, named globally
// ("transformer.h.0.attn.probs"), and fills it only through its ActivationStash:
//
//     probs_ = …                          // not possible: a SavedTensor has no assignment
//     saved_.keep(probs_, probs);         // kept, and recorded in the MemoryLedger if one is attached
//     … probs_.get() …                    // in backward; a tp::Error if forward did not keep it
//
// So a layer cannot hold on to an activation without the ledger seeing it, and the ledger's sum per
// block is what activation memory costs (checked against lib/model/memory.h). A tensor that only
// one variant needs (SwiGLU's gate output, the sequence-parallel input shard, LayerNorm's mean) is
// a slot that the other variants never fill: SavedTensor is an optional.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "observe/memory_ledger.h"

namespace tp {

/// What a layer's forward saves: what its backward needs (training), or nothing (inference).
enum class Keep { ForBackward, Nothing };

/// One tensor a layer keeps from forward for backward: empty until its ActivationStash fills it.
class SavedTensor {
 public:
  /// name: the global name the ledger records it under, e.g. "transformer.h.0.ln_1.input".
  explicit SavedTensor(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }
  bool has_value() const { return value_.has_value(); }
  /// The kept tensor; a tp::Error naming the slot when forward did not keep it.
  const Tensor& get() const;
  /// Empties the slot (a forward that does not need it this time).
  void reset() { value_.reset(); }

 private:
  friend class ActivationStash;
  friend class MemoryLedger;  // MemoryLedger::take / restore move the value out and back
  std::string name_;
  std::optional<Tensor> value_;
};

/// Where a layer's SavedTensors are recorded: a MemoryLedger (or none) and the block index.
class ActivationStash {
 public:
  /// From now on record into `ledger` (nullptr: keep without recording) under block `layer`
  /// (−1: outside the blocks: embedding, final norm, head).
  void attach(MemoryLedger* ledger, int64_t layer) {
    ledger_ = ledger;
    layer_ = layer;
  }
  /// slot = t, recorded in the ledger as slot.name() (a tensor already recorded, e.g. the input
  /// that q, k and v share, is counted once). Returns t. When the attached ledger is not keeping
  /// (MemoryLedger::set_keeping), the slot is emptied instead and nothing is recorded.
  const Tensor& keep(SavedTensor& slot, const Tensor& t);

 private:
  MemoryLedger* ledger_ = nullptr;
  int64_t layer_ = -1;
};

}  // namespace tp
