#include "model/dropout.h"

namespace tp {

Dropout::Dropout(Device& device, std::string site, float p)
    : device_(device), site_(std::move(site)), p_(p), mask_(site_ + ".dropout_mask") {}

Tensor Dropout::forward(const Tensor& x, uint64_t seed, int64_t step, int64_t row_offset) {
  return forward(x, seed, step, std::vector<RowRun>{RowRun{0, row_offset, x.rows()}});
}

Tensor Dropout::forward(const Tensor& x, uint64_t seed, int64_t step,
                        const std::vector<RowRun>& runs) {
  if (p_ == 0.0f || !enabled_) return x;
  Tensor mask(device_, x.shape());  // f32 in either precision: 1/(1 − p) exactly
  const RngKey key = RngKey::from(seed, "dropout/" + std::to_string(step) + "/" + site_);
  for (const RowRun& run : runs) {
    Tensor part = mask.view(run.local_row, run.local_row + run.rows);
    device_.dropout_mask(part, key, GlobalIndex::rows(x.cols(), run.global_row), p_);
  }
  saved_.keep(mask_, mask);
  Tensor y(device_, x.shape(), x.dtype());
  device_.mul(x, mask, y);
  return y;
}

Tensor Dropout::backward(const Tensor& dy) {
  if (p_ == 0.0f) return dy;
  Tensor dx(device_, dy.shape(), dy.dtype());
  device_.mul(dy, mask_.get(), dx);
  return dx;
}

}  // namespace tp
