#include "model/evaluate.h"

#include "core/error.h"

namespace tp {

double held_out_loss(Gpt& model, const TokenSource& source, int64_t batches, int64_t batch,
                     int64_t seq, uint64_t seed, const EvalSlice& slice) {
  const int64_t count = slice.count > 0 ? slice.count : batch;
  TP_CHECK(
      batches >= 1 && slice.micro >= 1 && count % slice.micro == 0 && slice.first + count <= batch,
      "held_out_loss: batches=", batches, ", sequences [", slice.first, ", ", slice.first + count,
      ") of ", batch, " in ", slice.micro, " forwards");
  const int64_t each = count / slice.micro;
  model.set_training(false);
  double sum = 0;
  try {
    for (int64_t i = 0; i < batches; ++i) {
      const Batch whole = source.held_out_batch(i, batch, seq);
      for (int j = 0; j < slice.micro; ++j)
        sum +=
            model.forward(each == batch ? whole : batch_slice(whole, slice.first + j * each, each),
                          seed, /*step=*/0);
    }
  } catch (...) {
    model.set_training(true);
    throw;
  }
  model.set_training(true);
  return sum / static_cast<double>(batches * slice.micro);
}

}  // namespace tp
