// train.h — one training step, the same everywhere (tp_train, lesson 07, the tests).
#pragma once

#include <functional>

#include "model/adamw.h"
#include "model/gpt.h"

namespace tp {

struct StepResult {
  float loss = 0;        ///< mean cross-entropy of the batch (before the update)
  double grad_norm = 0;  ///< global gradient norm (before clipping)
  float clip = 1;        ///< the factor the gradients were scaled by
};

/// zero_grad → forward → backward → finish_gradients → [after_backward()] → global gradient norm
/// → clip → AdamW.
/// Collective: every rank calls it with the same batch.
StepResult train_step(Communicator& comm, Device& device, Gpt& model, AdamW& opt,
                      const Batch& batch, uint64_t seed, int64_t step, float lr,
                      float max_grad_norm,
                      const std::function<void(float loss)>& after_backward = {});

}  // namespace tp
