#include "model/evaluate.h"

#include <functional>
#include <limits>

#include "core/error.h"

namespace tp {

namespace {

// The mean over held-out batches 0 .. batches-1 (or `slice` of each) of `forward`'s loss, with the
// model in evaluation mode (dropout off) throughout; NaN when `stop` ended it early.
double mean_held_out(Gpt& model, const TokenSource& source, int64_t batches, int64_t batch,
                     int64_t seq, const EvalSlice& slice, const StopEvaluation& stop,
                     const std::function<double(const Batch&)>& forward) {
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
        sum += forward(each == batch ? whole : batch_slice(whole, slice.first + j * each, each));
      if (stop && stop()) {
        sum = std::numeric_limits<double>::quiet_NaN();
        break;
      }
    }
  } catch (...) {
    model.set_training(true);
    throw;
  }
  model.set_training(true);
  return sum / static_cast<double>(batches * slice.micro);
}

}  // namespace

double held_out_loss(Gpt& model, const TokenSource& source, int64_t batches, int64_t batch,
                     int64_t seq, uint64_t seed, const EvalSlice& slice,
                     const StopEvaluation& stop) {
  return mean_held_out(model, source, batches, batch, seq, slice, stop,
                       [&](const Batch& b) { return model.forward(b, seed, /*step=*/0); });
}

double held_out_loss(Gpt& model, Communicator& pp, const TokenSource& source, int64_t batches,
                     int64_t batch, int64_t seq, uint64_t seed, const EvalSlice& slice,
                     const StopEvaluation& stop) {
  if (pp.size() == 1) return held_out_loss(model, source, batches, batch, seq, seed, slice, stop);
  const int s = pp.rank(), last = pp.size() - 1;
  Device& device = model.params().front().value.device();
  const GptConfig& cfg = model.config();
  CommLedger::Scope scope(pp.ledger(), "eval");
  const double mean =
      mean_held_out(model, source, batches, batch, seq, slice, stop, [&](const Batch& b) -> double {
        Tensor input;
        if (s > 0) {  // the previous stage's output: (S·B, h), under SP this rank's 1/t of the rows
          const int64_t n = b.seq * b.batch;
          input = Tensor(device, Shape{cfg.sp ? n / model.tp_size() : n, cfg.hidden},
                         cfg.compute_dtype());
          pp.recv(input, s - 1);
        }
        float loss = 0;
        const Tensor out = model.forward_stage(b, input, seed, /*step=*/0, &loss);
        if (s < last) pp.send(out, s + 1);
        return loss;  // meaningful on the last stage only
      });
  // From the last stage to every stage, as two floats (the double's leading bits and the rest).
  const float hi = static_cast<float>(mean), lo = static_cast<float>(mean - hi);
  Tensor v = Tensor::from_host(device, Shape{2}, {hi, lo});
  pp.broadcast(v, last);
  const std::vector<float> got = v.to_host();
  return static_cast<double>(got[0]) + static_cast<double>(got[1]);
}

}  // namespace tp
