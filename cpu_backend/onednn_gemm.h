// onednn_gemm.h — the CPU backend's oneDNN engine (optional: built when the Makefile finds oneDNN,
// TP_HAVE_ONEDNN): its bf16 matmul, its f32 matmul, and its f32 matmul on a B packed once. Which
// GEMM takes which engine is gemm_choice.h's; this file only runs them (and says what oneDNN would
// run on this CPU: onednn_isa).
//
//   C = alpha · op(A) op(B) + beta · C      op(A): (m, k), op(B): (k, n), C: (m, n)
//   bf16: A, B bf16; C f32 or bf16; the products are accumulated in f32 and a bf16 C is rounded
//   once from the f32 result (with beta ≠ 0, the old bf16 C is read, added in f32, rounded once).
//
// Row strides lda, ldb, ldc as in blas.h (A stored (k, m) when trans_a), so sub-blocks pass
// without a copy. oneDNN builds a primitive per (sizes, strides, transposes, C dtype, alpha, beta,
// threads), which costs far more than a small GEMM: each is made once and kept (a process-wide
// cache). alpha is oneDNN's output scale, beta its sum post-op.
//
// Threads: Debian's libdnnl uses GNU OpenMP and runs each call on omp_get_max_threads() threads,
// the CPU device's OpenMP threads (the launcher's budget: ranks × threads ≤ cores).
//
// The f32 GEMM with B packed once (the ring's t row blocks against one weight, core/device.h:
// Device::pack_gemm_b): oneDNN's f32 matmul takes its weights in a layout of its own choosing
// (memory::format_tag::any): one reorder into it (onednn_f32_pack), then every block's matmul reads
// the packed weight directly. Offered only where oneDNN picks a brgemm kernel that wants a layout
// other than the plain one (AVX-512 and up): else onednn_f32_layout answers nullptr and the caller
// stays on cblas_sgemm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tp::cpu {

/// What oneDNN's CPU dispatcher runs on this machine (dnnl::get_effective_cpu_isa), for
/// gemm_choice.cpp: its name ("avx512_core_amx") and the three facts the choice asks. All false and
/// "" in a build without oneDNN.
struct OnednnIsa {
  std::string name;
  bool avx512 = false;       ///< at or above avx512_core
  bool native_bf16 = false;  ///< at or above avx512_core_bf16 (AVX512-BF16, or AMX)
  bool amx = false;          ///< avx512_core_amx itself
};
OnednnIsa onednn_isa();

/// C = alpha op(A) op(B) + beta C, all f32, through oneDNN (the layout as blas.h's sgemm). Returns
/// false, having touched nothing, when oneDNN has no optimised kernel for it or the build has no
/// oneDNN; m, n, k > 0.
bool onednn_gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                     int64_t ldc);

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

/// The layout oneDNN's f32 matmul chooses for a B against A blocks of m rows (opaque).
struct F32PackedLayout;

/// The layout for op(B) (k, n) stored with row stride ldb ((n, k) when trans_b), against A of m
/// rows (plain, row stride k), alpha 1, beta 0; nullptr when packing does not pay here (no oneDNN
/// in the build, no brgemm kernel for the case, a plain layout chosen, an empty size). impl, if
/// given, gets oneDNN's kernel name ("brg:avx512_core"; "" when oneDNN refused).
std::shared_ptr<const F32PackedLayout> onednn_f32_layout(bool trans_b, int64_t m, int64_t n,
                                                         int64_t k, int64_t ldb,
                                                         std::string* impl = nullptr);
/// Bytes of one B in `layout`.
size_t onednn_f32_packed_bytes(const F32PackedLayout& layout);
/// Reorders B (as described to onednn_f32_layout) into `packed`: onednn_f32_packed_bytes of them,
/// 64-byte aligned.
void onednn_f32_pack(const F32PackedLayout& layout, const float* b, void* packed);
/// C = alpha op(A) op(B) + beta C with op(B) packed in `layout` (C: (m, n), row stride ldc; A
/// (m, k), or stored (k, m) when trans_a, row stride lda). m may differ from the layout's. Returns
/// false, having touched nothing, when oneDNN's kernel for this A, alpha and beta would want B in
/// another layout or is its reference one: the caller runs sgemm on the plain B.
bool onednn_f32_gemm_packed(const F32PackedLayout& layout, bool trans_a, int64_t m, float alpha,
                            const float* a, int64_t lda, const void* packed, float beta, float* c,
                            int64_t ldc);

}  // namespace tp::cpu
