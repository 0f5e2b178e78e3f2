// rng.cu — the GPU backend's counter-based random kernels: fill_random (parameter initialisation)
// and dropout_mask, both tp::random_value (core/rng.h) of each element's global index, so a shard
// holds the same numbers whatever t is and whichever backend fills it: bit for bit on the uniform
// path (dropout masks, uniform init), up to 1 f32 ulp on the normal path (random_value_device).
// The math is in core/device.h; the CPU's are in cpu_backend/kernels/rng.cpp.
#include <cstdint>

#include "core/rng.h"
#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// tp::random_value on the device (core/rng.cpp), for one global index:
//   bits = Philox4x32-10(counter = (i_lo, i_hi, 0, 0), key)      (core/rng.h, constexpr, shared)
//   unit(w) = (w >> 8) · 2⁻²⁴ ∈ [0, 1)
//   uniform: a + (b − a) · unit(bits[0]), in double, rounded once to f32
//   normal:  a + b · √(−2 ln u1) · cos(2π u2), u1 = unit(bits[0]) + 2⁻²⁴ ∈ (0, 1], u2 = unit(bits[1])
// Every multiply-add is written __dmul_rn / __dadd_rn, two roundings as on the CPU (no FMA), so the
// uniform path is bit-identical to random_value. The normal path calls CUDA's double log / cos
// (≤ 1 / 2 ulp) where the CPU calls glibc's (< 1 ulp): z may differ in the last bit of the double,
// which almost never changes the f32 result — equal up to 1 f32 ulp, not guaranteed bit-identical.
__device__ float random_value_device(RngKey key, int64_t global_index, bool normal, float a,
                                     float b) {
  const uint64_t i = static_cast<uint64_t>(global_index);
  const auto r =
      philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0u, 0u}, key);
  constexpr double kUnit = 1.0 / 16777216.0;  // 2⁻²⁴; scaling by it is exact
  if (!normal) {
    const double u = static_cast<double>(r[0] >> 8) * kUnit;
    const double width = static_cast<double>(b) - static_cast<double>(a);
    return __double2float_rn(__dadd_rn(static_cast<double>(a), __dmul_rn(width, u)));
  }
  const double u1 = __dadd_rn(static_cast<double>(r[0] >> 8) * kUnit, kUnit);
  const double u2 = static_cast<double>(r[1] >> 8) * kUnit;
  const double z = __dmul_rn(sqrt(-2.0 * log(u1)), cos(__dmul_rn(6.283185307179586, u2)));
  return __double2float_rn(__dadd_rn(static_cast<double>(a), __dmul_rn(static_cast<double>(b), z)));
}

// Over i = r · cols + c. Both kernels are kernel<kTyped> over gpu::Out (kernel_util.cuh): a bf16
// output gets the f32 value rounded once.
template <bool T>
__global__ void fill_random_kernel(gpu::Out<T> x, int64_t n, int64_t cols, RngKey key,
                                   int64_t offset, int64_t row_stride, bool normal, float a,
                                   float b) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    x.set(i, random_value_device(key, offset + r * row_stride + c, normal, a, b));
  }
}

// keep = 1 / (1 − p) is computed on the host in f32, as the CPU does.
template <bool T>
__global__ void dropout_mask_kernel(gpu::Out<T> mask, int64_t n, int64_t cols, RngKey key,
                                    int64_t offset, int64_t row_stride, float p, float keep) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float u = random_value_device(key, offset + r * row_stride + c, false, 0.0f, 1.0f);
    mask.set(i, u >= p ? keep : 0.0f);
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                                const Distribution& dist) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const bool normal = dist.kind == Distribution::Kind::Normal;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    fill_random_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(
        gpu::out<T>(x), n, x.cols(), key, index.offset, index.row_stride, normal, dist.a, dist.b);
      },
      x);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_dropout_mask(Tensor& mask, const RngKey& key, const GlobalIndex& index,
                                 float p) {
  const int64_t n = mask.numel();
  if (n == 0) return;
  const float keep = 1.0f / (1.0f - p);
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    dropout_mask_kernel<T><<<gpu::elementwise_blocks(n), gpu::kThreads, 0, stream_>>>(
        gpu::out<T>(mask), n, mask.cols(), key, index.offset, index.row_stride, p, keep);
      },
      mask);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
