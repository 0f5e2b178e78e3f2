// norm.h — LayerNorm and RMSNorm over the hidden dim, replicated under TP.
// Forward (saving what backward needs, through the layer's ActivationStash: observe/
// activation_stash.h) beside backward (returning dX, accumulating parameter gradients with +=).
//
// Shape legend: N = S·B tokens (sequence-major rows, token (s, b) is row s·B + b), h = hidden,
// ffn = MLP inner size, nh / nkv = query / key-value heads, hd = h / nh, t = TP size.
// The project's full legend (S, B, h, nh, nkv, hd, ffn, V, t): core/device.h.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "model/config.h"
#include "observe/activation_stash.h"
#include "parallel/param.h"

namespace tp {

/// LayerNorm (y = (x − μ)/σ ⊙ w + b) or RMSNorm (y = x / rms(x) ⊙ w) over the hidden dim.
/// Replicated under plain TP: its input is the whole hidden vector on every rank, because a norm
/// needs statistics of the whole vector (lesson 06).
class Norm {
 public:
  /// kind: NormKind::LayerNorm or NormKind::RmsNorm. name: e.g. "transformer.h.0.ln_1". With
  /// sequence_parallel the norm sees only this rank's tokens, so its parameter gradients are
  /// partial sums (Param::sequence_parallel_grad).
  Norm(Device& device, std::string name, int64_t hidden, NormKind kind, float eps,
       bool sequence_parallel = false);
  /// x: (N, h) → y: (N, h). Saves x and the row statistics, unless keep is Keep::Nothing (inference).
  Tensor forward(const Tensor& x, Keep keep_mode = Keep::ForBackward);
  /// The residual add before the norm fused into it: sum = x + r (written), returns norm(sum), as
  /// forward(sum) (saving sum; the same bits as the add then forward). x, r, sum, y: (N, h).
  Tensor forward_add(const Tensor& x, const Tensor& r, Tensor& sum,
                     Keep keep_mode = Keep::ForBackward);
  /// dy: (N, h) → dx: (N, h); dweight (and dbias) accumulate.
  Tensor backward(const Tensor& dy);
  /// dres + backward(dy) in one kernel (the residual's gradient joined with the norm's): the same
  /// bits as the add of the two. dres, dy: (N, h).
  Tensor backward_add(const Tensor& dres, const Tensor& dy);
  void collect_params(ParamList& out) const;
  bool is_rms() const { return rms_; }
  /// Record what forward keeps in `ledger` under block `layer`.
  void observe(MemoryLedger* ledger, int64_t layer) { saved_.attach(ledger, layer); }
  /// Computes with copies of weight and bias in `dtype` (bf16: refreshed from the fp32 master by
  /// the model's refresh_compute_copies; f32: the parameters themselves). The statistics (mean,
  /// rstd) are f32 in either.
  void set_compute_dtype(Dtype dtype);

  Tensor weight, bias, dweight, dbias;  ///< (h); bias only for LayerNorm

 private:
  /// forward and forward_add: r and sum null, or the residual and the sum the fused kernel writes.
  Tensor forward_body(const Tensor& x, const Tensor* r, Tensor* sum, Keep keep_mode);
  /// backward and backward_add: dres null, or the residual's gradient joined to dx.
  Tensor backward_body(const Tensor* dres, const Tensor& dy);

  Device& device_;
  std::string name_;
  bool rms_;
  float eps_;
  bool sp_;
  ActivationStash saved_;
  SavedTensor x_, mean_, rstd_;     // input (N, h); statistics (N), the mean for LayerNorm only
  Tensor weight_copy_, bias_copy_;  // bf16 compute copies (set_compute_dtype), else undefined
};

}  // namespace tp
