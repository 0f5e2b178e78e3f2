// dropout.h — inverted dropout with a counter-based mask, the same for every t.
// Forward (saving what backward needs, through the layer's ActivationStash: observe/
// activation_stash.h) beside backward (returning dX, accumulating parameter gradients with +=).
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// ffn = MLP inner size, nh / nkv = query / key-value heads, hd = h / nh, t = TP size.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <string>

#include <vector>

#include "core/device.h"
#include "observe/activation_stash.h"
#include "parallel/context_parallel.h"

namespace tp {

/// Inverted dropout with a counter-based mask: element (token row r, feature c) of site `site` at
/// training step `step` is kept when uniform(seed, "dropout/<step>/<site>", (row_offset + r)·h + c)
/// ≥ p. The mask depends on global positions only, so it is the same for every t.
class Dropout {
 public:
  Dropout(Device& device, std::string site, float p);
  /// x: (N, h) → y = x ⊙ mask / (1 − p). p = 0: returns x.
  Tensor forward(const Tensor& x, uint64_t seed, int64_t step, int64_t row_offset = 0);
  /// The same with x's rows in runs of consecutive global rows (context parallelism's zigzag
  /// chunks: parallel/context_parallel.h's cp_row_runs); one run {0, row_offset, N} is the above.
  Tensor forward(const Tensor& x, uint64_t seed, int64_t step, const std::vector<RowRun>& runs);
  /// dx = dy ⊙ mask / (1 − p).
  Tensor backward(const Tensor& dy);
  void observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }
  /// Off: forward returns x (evaluation: model/evaluate.h); on again for training.
  void set_enabled(bool on) { enabled_ = on; }

 private:
  Device& device_;
  std::string site_;
  float p_;
  bool enabled_ = true;
  ActivationStash saved_;
  SavedTensor mask_;  // (N, h), 0 or 1/(1 − p); not kept when p = 0
};

}  // namespace tp
