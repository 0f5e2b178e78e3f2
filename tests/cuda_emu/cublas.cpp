// cublas.cpp — the CUDA emulator's cuBLAS: the GEMMs the GPU backend calls, column-major, computed
// on the CPU and queued on the handle's stream. TF32 math mode rounds the fp32 inputs to TF32
// (10-bit mantissa); bf16 inputs are read as bf16. Checks: every operand lies inside device memory;
// inputs other than f32 or bf16, or an output other than f32, are CUBLAS_STATUS_NOT_SUPPORTED.
#include <cstring>

#include "cublas_v2.h"
#include "cuda_bf16.h"

using namespace cuda_emu;

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

float to_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&f, &u, 4);
  return f;
}

float load(const void* base, cudaDataType_t type, int64_t i, bool tf32) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  const float v = static_cast<const float*>(base)[i];
  return tf32 ? to_tf32(v) : v;
}

size_t elem_size(cudaDataType_t t) { return t == CUDA_R_16BF ? 2 : 4; }

struct GemmArgs {
  cublasOperation_t ta, tb;
  int m, n, k;
  float alpha, beta;
  const void* A;
  cudaDataType_t at;
  int lda;
  long long sa;
  const void* B;
  cudaDataType_t bt;
  int ldb;
  long long sb;
  float* C;
  int ldc;
  long long sc;
  int batch;
  bool tf32;
};

cublasStatus_t gemm(cublasHandle_t h, const GemmArgs& g, const char* call) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 ||
      (g.ta != CUBLAS_OP_N && g.ta != CUBLAS_OP_T) || (g.tb != CUBLAS_OP_N && g.tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  const int a_rows = g.ta == CUBLAS_OP_N ? g.m : g.k, a_cols = g.ta == CUBLAS_OP_N ? g.k : g.m;
  const int b_rows = g.tb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.tb == CUBLAS_OP_N ? g.n : g.k;
  if (g.lda < std::max(1, a_rows) || g.ldb < std::max(1, b_rows) || g.ldc < std::max(1, g.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;
  // Every operand must lie inside device memory (a real GPU would fault or read garbage).
  for (int b = 0; b < g.batch; ++b) {
    const size_t a_span = (static_cast<size_t>(g.lda) * (a_cols - 1) + a_rows) * elem_size(g.at);
    const size_t b_span = (static_cast<size_t>(g.ldb) * (b_cols - 1) + b_rows) * elem_size(g.bt);
    const size_t c_span = (static_cast<size_t>(g.ldc) * (g.n - 1) + g.m) * 4;
    const char* a =
        static_cast<const char*>(g.A) + b * g.sa * static_cast<long long>(elem_size(g.at));
    const char* bb =
        static_cast<const char*>(g.B) + b * g.sb * static_cast<long long>(elem_size(g.bt));
    const float* c = g.C + b * g.sc;
    if (g.k > 0 && !is_device_range(a, a_span))
      fatal("%s: A (batch %d) %p + %zu bytes is not device memory", call, b,
            static_cast<const void*>(a), a_span);
    if (g.k > 0 && !is_device_range(bb, b_span))
      fatal("%s: B (batch %d) %p + %zu bytes is not device memory", call, b,
            static_cast<const void*>(bb), b_span);
    if (!is_device_range(c, c_span))
      fatal("%s: C (batch %d) %p + %zu bytes is not device memory", call, b,
            static_cast<const void*>(c), c_span);
  }
  const GemmArgs a = g;
  enqueue_work(h->stream, call, [a] {
    for (int b = 0; b < a.batch; ++b) {
      const char* A =
          static_cast<const char*>(a.A) + b * a.sa * static_cast<long long>(elem_size(a.at));
      const char* B =
          static_cast<const char*>(a.B) + b * a.sb * static_cast<long long>(elem_size(a.bt));
      float* C = a.C + b * a.sc;
      for (int j = 0; j < a.n; ++j)
        for (int i = 0; i < a.m; ++i) {
          float acc = 0.0f;
          for (int l = 0; l < a.k; ++l) {
            const int64_t ai = a.ta == CUBLAS_OP_N ? i + static_cast<int64_t>(l) * a.lda
                                                   : l + static_cast<int64_t>(i) * a.lda;
            const int64_t bi = a.tb == CUBLAS_OP_N ? l + static_cast<int64_t>(j) * a.ldb
                                                   : j + static_cast<int64_t>(l) * a.ldb;
            acc += load(A, a.at, ai, a.tf32) * load(B, a.bt, bi, a.tf32);
          }
          float& c = C[i + static_cast<int64_t>(j) * a.ldc];
          c = a.beta == 0.0f ? a.alpha * acc : a.alpha * acc + a.beta * c;  // β = 0: C is not read
        }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* A, int lda,
                           const float* B, int ldb, const float* beta, float* C, int ldc) {
  return gemm(h, {ta,         tb,     m,     n,
                  k,          *alpha, *beta, A,
                  CUDA_R_32F, lda,    0,     B,
                  CUDA_R_32F, ldb,    0,     C,
                  ldc,        0,      1,     h != nullptr && h->math == CUBLAS_TF32_TENSOR_OP_MATH},
              "cublasSgemm");
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda, long long sa,
                                         const float* B, int ldb, long long sb, const float* beta,
                                         float* C, int ldc, long long sc, int batch) {
  return gemm(h, {ta,         tb,     m,     n,
                  k,          *alpha, *beta, A,
                  CUDA_R_32F, lda,    sa,    B,
                  CUDA_R_32F, ldb,    sb,    C,
                  ldc,        sc,     batch, h != nullptr && h->math == CUBLAS_TF32_TENSOR_OP_MATH},
              "cublasSgemmStridedBatched");
}

namespace {
cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                       int k, const void* alpha, const void* A, cudaDataType_t at, int lda,
                       long long sa, const void* B, cudaDataType_t bt, int ldb, long long sb,
                       const void* beta, void* C, cudaDataType_t ct, int ldc, long long sc,
                       int batch, cublasComputeType_t compute, const char* call) {
  if ((at != CUDA_R_32F && at != CUDA_R_16BF) || bt != at || ct != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator does f32 or bf16 inputs, f32 output
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32 &&
      compute != CUBLAS_COMPUTE_32F_PEDANTIC)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool tf32 =
      at == CUDA_R_32F &&
      (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
       (compute == CUBLAS_COMPUTE_32F && h != nullptr && h->math == CUBLAS_TF32_TENSOR_OP_MATH));
  return gemm(h,
              {ta,
               tb,
               m,
               n,
               k,
               *static_cast<const float*>(alpha),
               *static_cast<const float*>(beta),
               A,
               at,
               lda,
               sa,
               B,
               bt,
               ldb,
               sb,
               static_cast<float*>(C),
               ldc,
               sc,
               batch,
               tf32},
              call);
}
}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType_t at,
                            int lda, const void* B, cudaDataType_t bt, int ldb, const void* beta,
                            void* C, cudaDataType_t ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  return gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                 compute, "cublasGemmEx");
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType_t at,
                                          int lda, long long sa, const void* B, cudaDataType_t bt,
                                          int ldb, long long sb, const void* beta, void* C,
                                          cudaDataType_t ct, int ldc, long long sc, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  return gemm_ex(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc,
                 batch, compute, "cublasGemmStridedBatchedEx");
}
