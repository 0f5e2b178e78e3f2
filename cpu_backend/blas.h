// blas.h — the CPU backend's matrix multiply: CBLAS (OpenBLAS), row-major f32.
//
//   C = alpha · op(A) op(B) + beta · C      op(A): (m, k), op(B): (k, n), C: (m, n)
//
// lda, ldb, ldc are the row strides of the stored matrices (A is stored (k, m) when trans_a), so a
// block of a larger matrix (one attention head's columns of q) is passed without a copy. The
// naive reference the tests compare it with is tp::host_gemm (lib/core/host.h).
//
// Where OpenBLAS runs kernels without AVX-512 on an AVX-512 CPU it does not know, oneDNN's f32
// matmul takes the call instead (onednn_gemm.h; gemm_choice.h, f32_gemm, says when).
//
// Threads: OpenBLAS runs a GEMM on set_blas_threads() threads, which the CPU device sets to its
// OpenMP thread count (cores of the node ÷ ranks on it, launcher/node.h), so ranks × BLAS threads
// never exceed the cores. Called inside an OpenMP parallel region (no kernel of the project does
// that today: the attention has its own tiles, kernels/attention.cpp), the OpenMP build of
// OpenBLAS runs each call on the calling thread alone, and the call stays on OpenBLAS even where
// f32_gemm is oneDNN (the process shares one oneDNN stream).
#pragma once

#include <cstdint>

namespace tp::cpu {

/// C = alpha op(A) op(B) + beta C through cblas_sgemm (or oneDNN: f32_gemm). Empty shapes are
/// handled here (m or n = 0: nothing; k = 0: C = beta C, beta = 0 overwriting C even when it holds
/// NaN), since CBLAS rejects leading dimensions below 1.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The threads OpenBLAS uses for one call from outside a parallel region (at least 1).
void set_blas_threads(int threads);

/// True when the CPU has AVX-512 (F, BW, VL and DQ) and the OpenBLAS kernels in use have none
/// (openblas_get_corename is not SkylakeX, Cooperlake or SapphireRapids): OPENBLAS_CORETYPE held
/// them back, or the OpenBLAS is older than the CPU.
bool openblas_lacks_avx512();

}  // namespace tp::cpu
