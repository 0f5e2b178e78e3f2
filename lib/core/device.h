// device.h — the abstract Device: memory and compute kernels for one rank.
//
// Everything in lib/ computes through this interface, so the same code runs on the CPU backend
// (OpenMP) and the GPU backend (CUDA). Kernels work on contiguous f32 tensors; a tensor of any rank
// is seen as the 2-D matrix [rows, cols] = [product of all dims but the last, last dim].
//
// Shape legend used in comments: m, n, k = GEMM sizes; rows, cols = the 2-D view of a tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/rng.h"
#include "core/tensor.h"

namespace tp {

/// Memory and kernels of one rank. One per process; it must outlive every Tensor it allocated.
class Device {
 public:
  virtual ~Device() = default;

  /// Human-readable name: "cpu (openmp x2)", "cuda:0 (H200)".
  virtual std::string name() const = 0;
  /// True when the host may read and write tensor memory directly (so MPI can use it unstaged).
  virtual bool host_accessible() const = 0;

  // ---- memory --------------------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  ///< device to device
  /// Waits until every kernel launched so far has finished.
  virtual void synchronize() = 0;

  // ---- elementwise ---------------------------------------------------------------------------
  /// x[:] = value
  virtual void fill(Tensor& x, float value) = 0;
  /// x[:] *= alpha
  virtual void scale(Tensor& x, float alpha) = 0;
  /// y[:] += alpha * x[:]   (same numel)
  virtual void axpy(float alpha, const Tensor& x, Tensor& y) = 0;

  // ---- matrix multiply -----------------------------------------------------------------------
  /// C = alpha * op(A) op(B) + beta * C, row-major; op(X) = X or Xᵀ.
  /// A: (m, k), or (k, m) when trans_a; B: (k, n), or (n, k) when trans_b; C: (m, n).
  /// With beta = 0, C is overwritten (its old contents, even NaN, are ignored).
  virtual void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b,
                    float beta, Tensor& c) = 0;

  // ---- bias ----------------------------------------------------------------------------------
  /// y[r, :] += bias[:] for every row r.   y: (rows, n), bias: (n)
  virtual void add_bias(Tensor& y, const Tensor& bias) = 0;
  /// dbias[:] += Σ_r dy[r, :].   dbias: (n), dy: (rows, n)
  virtual void add_bias_backward(Tensor& dbias, const Tensor& dy) = 0;

  // ---- layout --------------------------------------------------------------------------------
  /// dst[r, dst_col + j] = src[r, src_col + j] for j < ncols and every row r (same row count).
  /// Splitting and concatenating along the last dimension are both this copy.
  virtual void copy_columns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                            int64_t ncols) = 0;

  // ---- initialisation ------------------------------------------------------------------------
  /// Fills a shard from the counter-based RNG: element (r, c) of `x` (2-D view) is the element
  /// with global index `index.offset + r * index.row_stride + c` of the parameter keyed by `key`.
  /// See core/rng.h; the value depends only on (key, global index), never on the shard.
  virtual void fill_random(Tensor& x, const RngKey& key, const GlobalIndex& index,
                           const Distribution& dist) = 0;
};

/// Creates the device named by `--backend` ("cpu" or "gpu"). Defined by the launcher, which knows
/// which backends this build contains; an unknown or missing backend is a bad-input tp::Error.
std::unique_ptr<Device> make_device(const std::string& backend, int local_rank);

}  // namespace tp
