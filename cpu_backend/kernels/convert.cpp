// convert.cpp — the CPU backend's dtype conversion (f32 ↔ bf16). The rule is in core/device.h;
// the bit work is core/dtype.h's (round to nearest even, exact widening), element by element, so
// the result does not depend on the thread count. The GPU's is gpu_backend/kernels/convert.cu.
#include <cstdint>

#include "core/dtype.h"
#include "cpu_device.h"
#include "kernels/kernel_util.h"

namespace tp {

void CpuDevice::do_convert(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == Dtype::f32) {  // f32 → bf16
    const float* in = src.data();
    auto* out = static_cast<uint16_t*>(dst.raw());
#pragma omp parallel for if (n > cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16_bits(in[i]);
  } else {  // bf16 → f32
    const auto* in = static_cast<const uint16_t*>(src.raw());
    float* out = dst.data();
#pragma omp parallel for if (n > cpu::kParallelMin)
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i]);
  }
}

}  // namespace tp
