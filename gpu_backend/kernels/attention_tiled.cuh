// attention_tiled.cuh — the tiled causal attention kernels (kernels/attention_tiled.cu), which
// CudaDevice's attention (kernels/attention.cu) calls for head dims up to kTiledMaxHeadDim. Every
// pointer is f32 device memory (bf16 tensors reach them widened: attention.cu's F32Staging); the
// layouts and the math are core/device.h's (Device::attention_forward, attention_backward).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/device.h"

namespace tp {
namespace gpu {

/// The largest head dim the tiled kernels take; larger ones use the cuBLAS path.
constexpr int64_t kTiledMaxHeadDim = 128;

inline bool tiled_attention_takes(const AttentionShape& sh) {
  return sh.head_dim > 0 && sh.head_dim <= kTiledMaxHeadDim;
}

/// out (S·B, nh·hd) and lse (B, nh, S) — lse may be null (the cached forward) — from q, k, v as
/// Device::attention_forward; queued on `stream`.
void tiled_attention_forward(cudaStream_t stream, float* out, float* lse, const float* q,
                             const float* k, const float* v, const AttentionShape& sh);

/// dq, dk, dv (written) as Device::attention_backward; `rowsum` is B·nh·S floats of scratch (the
/// rows' D = Σ dout ⊙ out). Queued on `stream`.
void tiled_attention_backward(cudaStream_t stream, float* dq, float* dk, float* dv,
                              const float* dout, const float* q, const float* k, const float* v,
                              const float* out, const float* lse, float* rowsum,
                              const AttentionShape& sh);

}  // namespace gpu
}  // namespace tp
