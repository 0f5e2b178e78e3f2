// train.h — one training step, the same everywhere (tp_train, lesson 07, the tests).
#pragma once

#include <functional>
#include <string>

#include "model/adamw.h"
#include "model/gpt.h"

namespace tp {

struct StepResult {
  float loss = 0;        ///< mean cross-entropy of the batch (before the update)
  double grad_norm = 0;  ///< global gradient norm (before clipping)
  float clip = 1;        ///< the factor the gradients were scaled by
  /// Empty when the loss and the gradient norm are finite. Otherwise the step made no update (no
  /// AdamW step, no weight change) and this names the first tensor holding a NaN/Inf: "loss", or
  /// "gradient of <param>" (the first in parameter order on any rank), or "gradient norm" when
  /// every gradient is finite but the sum of their squares overflowed. The same on every rank.
  std::string nonfinite;
};

/// zero_grad → forward → backward → finish_gradients → [after_backward()] → global gradient norm
/// → clip → AdamW. A non-finite loss or gradient norm skips the update (see StepResult::nonfinite).
/// Collective: every rank calls it with the same batch.
StepResult train_step(Communicator& comm, Device& device, Gpt& model, AdamW& opt,
                      const Batch& batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm,
                      const std::function<void(float loss)>& after_backward = {});

}  // namespace tp
