// selftest.cu — the CUDA emulator's own tests: what it claims to catch (tests/cuda_emu/include/
// cuda_emu.h), it catches. Written as CUDA (kernels and their launches) and built like the GPU
// backend's sources: scripts/cuda-emu-translate.pl, then g++ against the emulator's headers
// (build/emu/bin/emu_selftest, run by `make test`). Each failure mode is a death test: the emulator
// prints "cuda-emu: ERROR ..." and aborts.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

__global__ void block_sum_kernel(const float* x, float* out, int n) {
  __shared__ float s[256];
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

__global__ void write_kernel(float* x, int n, float v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = v;
}

__global__ void divergent_barrier_kernel(float* x) {
  if (threadIdx.x < 16) __syncthreads();
  x[threadIdx.x] = 1.0f;
}

// Each thread publishes a value, then reads its neighbour's — with or without the barrier.
__global__ void neighbour_kernel(float* out, bool barrier, float base) {
  __shared__ float s[64];
  s[threadIdx.x] = base + 100.0f * blockIdx.x + threadIdx.x;
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

float* device_floats(int n) {
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return p;
}

std::vector<float> to_host(const float* d, int n, cudaStream_t s = nullptr) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return h;
}

TEST(CudaEmu, BlockReductionAndWarpShuffle) {
  const int n = 1000;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7);
  float* dx = device_floats(n);
  float* out = device_floats(32);
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  block_sum_kernel<<<2, 256>>>(dx, out, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  float want = 0.0f;
  for (float v : x) want += v;
  const auto got = to_host(out, 2);
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);
  warp_sum_kernel<<<1, 32>>>(out);
  for (float v : to_host(out, 32)) EXPECT_EQ(v, 496.0f);  // 0 + 1 + … + 31 in every lane
  cudaFree(dx);
  cudaFree(out);
}

TEST(CudaEmu, StreamsRunWhenWaitedForAndEventsOrderThem) {
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  float* x = device_floats(64);
  std::vector<float> h(64, -1.0f);
  write_kernel<<<1, 64, 0, a>>>(x, 64, 3.0f);
  // A synchronous cudaMemcpy does not wait for a non-blocking stream: the kernel has not run.
  cudaMemcpy(h.data(), x, 64 * sizeof(float), cudaMemcpyDeviceToHost);
  EXPECT_NE(h[0], 3.0f) << "the copy saw work it did not wait for";
  cudaEvent_t e;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  cudaEventRecord(e, a);
  cudaStreamWaitEvent(b, e, 0);
  EXPECT_EQ(to_host(x, 64, b)[63], 3.0f) << "stream b waited for a's event";
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaFree(x);
}

TEST(CudaEmu, BadLaunchConfigurationIsALaunchError) {
  float* x = device_floats(8);
  write_kernel<<<1, 2048>>>(x, 8, 1.0f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared
  cudaFree(x);
}

TEST(CudaEmu, AMissingBarrierGivesWrongResultsInOneOfTwoBlocks) {
  float* out = device_floats(128);
  auto want = [](float base) {
    std::vector<float> w(128);
    for (int i = 0; i < 128; ++i) w[i] = base + 100.0f * (i / 64) + (i % 64 + 1) % 64;
    return w;
  };
  neighbour_kernel<<<2, 64>>>(out, true, 0.0f);
  EXPECT_EQ(to_host(out, 128), want(0.0f));
  neighbour_kernel<<<2, 64>>>(out, false, 1000.0f);
  const auto got = to_host(out, 128), w = want(1000.0f);
  EXPECT_NE(std::vector<float>(got.begin(), got.begin() + 64),
            std::vector<float>(w.begin(), w.begin() + 64));
  EXPECT_NE(std::vector<float>(got.begin() + 64, got.end()),
            std::vector<float>(w.begin() + 64, w.end()));
  cudaFree(out);
}

TEST(CudaEmu, CublasSgemmIsColumnMajor) {
  cublasHandle_t h;
  cublasCreate(&h);
  // A (2×3) and B (3×2), column-major.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 2, 1, 0, 3};
  float *da = device_floats(6), *db = device_floats(6), *dc = device_floats(4);
  cudaMemcpy(da, a.data(), 24, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), 24, cudaMemcpyHostToDevice);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2),
            CUBLAS_STATUS_SUCCESS);
  // C = A B with A = [1 3 5; 2 4 6], B = [1 1; 0 0; 2 3]: C(0,0) = 1 + 10 = 11, C(1,0) = 2 + 12 = 14,
  // C(0,1) = 1 + 15 = 16, C(1,1) = 2 + 18 = 20.
  EXPECT_EQ(to_host(dc, 4), (std::vector<float>{11, 14, 16, 20}));
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 1, db, 3, &zero, dc, 2),
            CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  cublasDestroy(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

using CudaEmuDeathTest = ::testing::Test;

TEST_F(CudaEmuDeathTest, HostDereferenceOfDeviceMemory) {
  float* x = device_floats(16);
  EXPECT_DEATH({ x[3] = 1.0f; }, "host code dereferenced device memory");
}

// write_kernel over n floats of x, which the emulator must stop with `message`.
void expect_write_kernel_dies(float* x, int n, const char* message) {
  EXPECT_DEATH(
      {
        write_kernel<<<1, 64>>>(x, n, 1.0f);
        cudaDeviceSynchronize();
      },
      message);
}

TEST_F(CudaEmuDeathTest, KernelWritesPastTheEnd) {
  expect_write_kernel_dies(device_floats(1024), 1025, "past the end of allocation");
}

TEST_F(CudaEmuDeathTest, KernelUsesFreedMemory) {
  float* x = device_floats(64);
  cudaFree(x);
  expect_write_kernel_dies(x, 64, "already freed");
}

TEST_F(CudaEmuDeathTest, BarrierNotReachedByEveryThread) {
  float* x = device_floats(64);
  EXPECT_DEATH(
      {
        divergent_barrier_kernel<<<1, 64>>>(x);
        cudaDeviceSynchronize();
      },
      "__syncthreads reached by 16 of 64 threads");
}

TEST_F(CudaEmuDeathTest, HostPointerAsAKernelArgument) {
  std::vector<float> host(64);
  EXPECT_DEATH(write_kernel<<<1, 64>>>(host.data(), 64, 1.0f), "argument 0 .* is a host pointer");
}

TEST_F(CudaEmuDeathTest, DoubleFree) {
  float* x = device_floats(8);
  cudaFree(x);
  EXPECT_DEATH(cudaFree(x), "freed twice");
}

}  // namespace
