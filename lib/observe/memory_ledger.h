// memory_ledger.h — every tensor a forward pass keeps for backward, with its size and layer.
//
// Layers keep tensors through an ActivationStash (activation_stash.h), which calls save() for each
// one; a tensor kept by several layers (the input that q, k and v share) is counted once. The per-layer sum is what activation memory costs, and
// the model checks it against a closed-form formula (lib/model/memory.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tp {

struct MemoryRecord {
  std::string name;  ///< "h.0.attn.probs"
  Shape shape;       ///< this rank's shape
  int64_t bytes = 0;
  int64_t layer = -1;  ///< block index; -1 outside the blocks (embedding, final norm, head)
};

class MemoryLedger {
 public:
  /// Records `t` as kept for backward (once per storage address; later saves of it are ignored).
  void save(const std::string& name, int64_t layer, const Tensor& t);
  /// Forgets everything (called at the start of each forward pass).
  void clear() {
    records_.clear();
    kept_.clear();
  }
  const std::vector<MemoryRecord>& records() const { return records_; }
  /// Bytes kept by block `layer`.
  int64_t layer_bytes(int64_t layer) const;
  /// Bytes kept in all.
  int64_t total_bytes() const;

 private:
  std::vector<MemoryRecord> records_;
  // The saved tensors themselves, so no address is reused while recorded.
  std::vector<Tensor> kept_;
};

}  // namespace tp
