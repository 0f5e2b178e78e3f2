// embedding.cu — the GPU backend's vocabulary-parallel token embedding (the masked lookup of a
// shard of wte) and the position embedding, each forward beside its backward. The math is in
// core/device.h; the CPU's are in cpu_backend/kernels/embedding.cpp.
//
// Determinism: no float atomics. The sums over repeated ids or positions (dwte, dwpe) are loops in
// a fixed order inside the thread that owns the output element, as on the CPU.
//
// Host round trips: token ids arrive as f32 device tensors, and the public Device call
// (core/device.cpp) copies them to the host to check them (one synchronisation per call).
// embedding_shard_backward reuses that host copy (host_ids) to group the positions by owned row (a
// stable counting sort, uploaded with a second, synchronous copy), so each row of dwte is summed
// by one thread per column, positions in increasing order, exactly as the CPU does.
#include <cstdint>
#include <vector>

#include "cuda_check.h"
#include "cuda_device.h"
#include "kernels/kernel_util.cuh"

namespace tp {

// =================================================================================================
// Kernels
// =================================================================================================

namespace {

// Every kernel here is kernel<kTyped> over gpu::In / gpu::Out (kernel_util.cuh): bf16 tables,
// activations and gradients read and written directly, the f32 sums as below, one rounding per
// stored element.

// One thread per (i, c). The ids were validated on the host.
template <bool T>
__global__ void embedding_shard_forward_kernel(gpu::Out<T> out, gpu::In<T> ids, gpu::In<T> wte,
                                               int64_t n, int64_t rows, int64_t h, int64_t first) {
  const int64_t items = n * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t i = item / h, c = item % h;
    const int64_t row = static_cast<int64_t>(ids[i]) - first;
    out.set(item, row >= 0 && row < rows ? wte[row * h + c] : 0.0f);
  }
}

// The host groups the positions i by owned row (unique rows u in increasing order; positions of
// row u at index[offsets[u] .. offsets[u + 1]), increasing). One thread per (u, c) adds dout[i, c]
// for those positions in order into the f32 value — the CPU's exact sequence of additions.
template <bool T>
__global__ void embedding_shard_backward_kernel(gpu::Out<T> dwte, gpu::In<T> dout,
                                                const int64_t* unique_rows, const int64_t* offsets,
                                                const int64_t* index, int64_t nunique, int64_t h) {
  const int64_t items = nunique * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t u = item / h, c = item % h;
    const int64_t dst = unique_rows[u] * h + c;
    float acc = dwte[dst];
    for (int64_t p = offsets[u]; p < offsets[u + 1]; ++p) acc += dout[index[p] * h + c];
    dwte.set(dst, acc);
  }
}

// Positions: global row g = s·B + b is position s = g / B. One thread per (r, c).
template <bool T>
__global__ void position_forward_kernel(gpu::Out<T> x, gpu::In<T> wpe, int64_t rows, int64_t h,
                                        int64_t batch, int64_t row0) {
  const int64_t items = rows * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t r = item / h, c = item % h;
    x.set(item, x[item] + wpe[((row0 + r) / batch) * h + c]);
  }
}

// One thread per (position s in [s0, s1), c), its held rows in order, added one by one into the
// f32 value as on the CPU.
template <bool T>
__global__ void position_backward_kernel(gpu::Out<T> dwpe, gpu::In<T> dx, int64_t rows, int64_t h,
                                         int64_t batch, int64_t row0, int64_t s0, int64_t s1) {
  const int64_t items = (s1 - s0) * h;
  for (int64_t item = gpu::global_thread(); item < items; item += gpu::grid_threads()) {
    const int64_t s = s0 + item / h, c = item % h;
    const int64_t r0 = (s * batch > row0 ? s * batch : row0) - row0;
    const int64_t r1 = ((s + 1) * batch < row0 + rows ? (s + 1) * batch : row0 + rows) - row0;
    const int64_t dst = s * h + c;
    float acc = dwpe[dst];
    for (int64_t r = r0; r < r1; ++r) acc += dx[r * h + c];
    dwpe.set(dst, acc);
  }
}

}  // namespace

// =================================================================================================
// Launchers
// =================================================================================================

void CudaDevice::do_embedding_shard_forward(Tensor& out, const Tensor& ids, const Tensor& wte_shard,
                                            int64_t first_id) {
  const int64_t n = ids.numel(), rows = wte_shard.rows(), h = wte_shard.cols();
  if (n * h == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    embedding_shard_forward_kernel<T>
        <<<gpu::elementwise_blocks(n * h), gpu::kThreads, 0, stream()>>>(
            gpu::out<T>(out), gpu::in<T>(ids), gpu::in<T>(wte_shard), n, rows, h, first_id);
      },
      out, ids, wte_shard);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_embedding_shard_backward(Tensor& dwte_shard, const Tensor& dout,
                                             const Tensor& ids, int64_t first_id,
                                             const float* host_ids) {
  const int64_t n = ids.numel(), rows = dwte_shard.rows(), h = dwte_shard.cols();
  if (h == 0) return;

  // Group the positions by owned row (stable counting sort). Host layout, int64:
  //   [unique rows (nunique)] [offsets (nunique + 1)] [positions (owned)]
  std::vector<int64_t> row_of(static_cast<size_t>(n));
  std::vector<int64_t> count(static_cast<size_t>(rows), 0);
  int64_t owned = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = static_cast<int64_t>(host_ids[i]) - first_id;
    row_of[i] = row >= 0 && row < rows ? row : -1;
    if (row_of[i] >= 0) {
      ++count[row_of[i]];
      ++owned;
    }
  }
  if (owned == 0) return;  // a shard that owns none of the ids leaves its gradient alone
  int64_t nunique = 0;
  for (int64_t r = 0; r < rows; ++r) nunique += count[r] > 0 ? 1 : 0;
  std::vector<int64_t> packed(static_cast<size_t>(2 * nunique + 1 + owned));
  int64_t* unique_rows = packed.data();
  int64_t* offsets = unique_rows + nunique;
  int64_t* index = offsets + nunique + 1;
  std::vector<int64_t> cursor(static_cast<size_t>(rows), -1);  // next free slot of each owned row
  int64_t u = 0, at = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (count[r] == 0) continue;
    unique_rows[u] = r;
    offsets[u] = at;
    cursor[r] = at;
    at += count[r];
    ++u;
  }
  offsets[nunique] = at;
  for (int64_t i = 0; i < n; ++i)
    if (row_of[i] >= 0) index[cursor[row_of[i]]++] = i;  // positions in increasing order

  const size_t bytes = packed.size() * sizeof(int64_t);
  int64_t* dev_packed = static_cast<int64_t*>(scratch(bytes));
  // Stream-ordered after earlier users of the scratch. `packed` is a pageable vector freed when we
  // return, and CUDA documents a pageable cudaMemcpyAsync only as "might be synchronous" (staging
  // before return is the guarantee of the synchronous cudaMemcpy, not of the Async form), so the
  // copy goes through copy_from_host, which waits for it (the call already synchronised once, to
  // bring the ids to the host for their check).
  copy_from_host(dev_packed, packed.data(), bytes);
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    embedding_shard_backward_kernel<T>
        <<<gpu::elementwise_blocks(nunique * h), gpu::kThreads, 0, stream()>>>(
            gpu::out<T>(dwte_shard), gpu::in<T>(dout), dev_packed, dev_packed + nunique,
            dev_packed + 2 * nunique + 1, nunique, h);
      },
      dwte_shard, dout);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_position_forward(Tensor& x, const Tensor& wpe, int64_t batch, int64_t row0) {
  const int64_t rows = x.rows(), h = x.cols();
  if (rows * h == 0) return;
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    position_forward_kernel<T><<<gpu::elementwise_blocks(rows * h), gpu::kThreads, 0, stream()>>>(
        gpu::out<T>(x), gpu::in<T>(wpe), rows, h, batch, row0);
      },
      x, wpe);
  CUDA_CHECK_LAUNCH();
}

void CudaDevice::do_position_backward(Tensor& dwpe, const Tensor& dx, int64_t batch, int64_t row0) {
  const int64_t rows = dx.rows(), h = dx.cols();
  if (rows == 0 || h == 0) return;
  const int64_t s0 = row0 / batch, s1 = (row0 + rows - 1) / batch + 1;  // positions [s0, s1)
  gpu::storage_of(
      [&](auto typed) {
    constexpr bool T = decltype(typed)::value;
    position_backward_kernel<T>
        <<<gpu::elementwise_blocks((s1 - s0) * h), gpu::kThreads, 0, stream()>>>(
            gpu::out<T>(dwpe), gpu::in<T>(dx), rows, h, batch, row0, s0, s1);
      },
      dwpe, dx);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tp
