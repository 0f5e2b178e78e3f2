// attention_merge.cpp — the CPU backend's merge of two partial attentions by their log-sum-exps
// (ring attention's step, parallel/ring_attention.h). The math is in core/device.h; the GPU's is
// in gpu_backend/kernels/attention_merge.cu.
//
// Per (row s·B + b, head j), l1 = lse[b, j, s], l2 = lse_part[b, j, s], m = max(l1, l2):
//   w1 = e^(l1 − m), w2 = e^(l2 − m),  out ← (w1·out + w2·out_part) / (w1 + w2),  lse ← m + log(w1 + w2)
// Subtracting the larger of the two first keeps both weights in [0, 1] (no overflow for any
// scores), as the online softmax does. A side with no keys at all (lse = −inf) weighs 0; both −inf
// leave the row as it was. One thread per row, each element one expression: the same bits for
// any thread count.
#include <cmath>
#include <cstdint>

#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

void CpuDevice::do_attention_merge(Tensor& out, Tensor& lse, const Tensor& out_part,
                                   const Tensor& lse_part, const AttentionShape& sh) {
  const int64_t S = sh.seq, B = sh.batch, nh = sh.heads, hd = sh.head_dim;
  float* po = out.data();
  float* pl = lse.data();
  const float* pp = out_part.data();
  const float* plp = lse_part.data();
#pragma omp parallel for collapse(2) if (S * B * nh * hd > cpu::kParallelMin)
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < nh; ++j) {
        float& l1 = pl[(b * nh + j) * S + s];
        const float l2 = plp[(b * nh + j) * S + s];
        const float m = l1 > l2 ? l1 : l2;
        if (m == -INFINITY) continue;  // neither side saw a key
        const float w1 = std::exp(l1 - m), w2 = std::exp(l2 - m), sum = w1 + w2;
        const float a = w1 / sum, c = w2 / sum;
        float* o = po + (s * B + b) * nh * hd + j * hd;
        const float* op = pp + (s * B + b) * nh * hd + j * hd;
        for (int64_t e = 0; e < hd; ++e) o[e] = a * o[e] + c * op[e];
        l1 = m + std::log(sum);
      }
}

}  // namespace tp
