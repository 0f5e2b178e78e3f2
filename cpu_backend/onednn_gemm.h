// onednn_gemm.h — the CPU backend's bf16 GEMM through oneDNN's matmul (optional: built when the
// Makefile finds oneDNN, TP_HAVE_ONEDNN), and the choice between it and the f32 stand-in.
//
//   C = alpha · op(A) op(B) + beta · C      op(A): (m, k), op(B): (k, n), C: (m, n)
//   A, B bf16; C f32 or bf16; the products are accumulated in f32 and a bf16 C is rounded once
//   from the f32 result (with beta ≠ 0, the old bf16 C is read, added in f32, rounded once).
//
// Row strides lda, ldb, ldc as in blas.h (A stored (k, m) when trans_a), so sub-blocks pass
// without a copy. oneDNN builds a primitive per (sizes, strides, transposes, C dtype, alpha, beta,
// threads), which costs far more than a small GEMM: each is made once and kept (a process-wide
// cache). alpha is oneDNN's output scale, beta its sum post-op.
//
// Threads: Debian's libdnnl uses GNU OpenMP and runs each call on omp_get_max_threads() threads,
// the CPU device's OpenMP threads (the launcher's budget: ranks × threads ≤ cores).
//
// The choice (choose_bf16_gemm): TP_CPU_BF16_GEMM=onednn|sgemm|auto (default auto). auto takes
// oneDNN where the CPU has a native bf16 ISA (dnnl::get_effective_cpu_isa() at or above
// avx512_core_bf16: AVX512-BF16 or AMX), else the stand-in (bf16 widened to f32, cblas_sgemm,
// rounded back): below that ISA oneDNN emulates bf16 and the stand-in wins (docs/model.md,
// "Precision", has the measurements).
#pragma once

#include <cstdint>
#include <string>

namespace tp::cpu {

/// The two bf16 GEMMs of the CPU backend.
enum class Bf16Gemm { sgemm, onednn };

/// The bf16 GEMM this process uses and a line naming it ("oneDNN (avx512_core_amx)",
/// "sgemm on f32 stand-ins (auto: ...)"). Reads TP_CPU_BF16_GEMM; a bad value, or onednn in a
/// build without oneDNN, throws tp::Error naming the fix.
struct Bf16GemmChoice {
  Bf16Gemm path = Bf16Gemm::sgemm;
  std::string note;
};
Bf16GemmChoice choose_bf16_gemm();

/// True when this build has the oneDNN path (TP_HAVE_ONEDNN).
bool have_onednn();

/// C = alpha op(A) op(B) + beta C through oneDNN, A and B bf16 bits, C f32 (c_bf16 false) or bf16
/// bits. Returns false, having touched nothing, when oneDNN has no optimised kernel for the case
/// (only its reference one, or none) or the build has no oneDNN: the caller falls back to the
/// stand-in. m or n = 0 is done (nothing to do); k = 0 is refused (the stand-in does C = beta C).
bool onednn_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                      void* c, bool c_bf16, int64_t ldc);

/// oneDNN's name of the kernel it would run for that case ("brg:avx512_core_amx_bf16"), or ""
/// when it refuses it (tests and the bench report it).
std::string onednn_gemm_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                             float alpha, int64_t lda, int64_t ldb, float beta, bool c_bf16,
                             int64_t ldc);

}  // namespace tp::cpu
