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
// "Precision", has the measurements). One exception: AVX512-BF16 without AMX where the f32 GEMMs
// run on oneDNN too (f32_gemm below), since there its bf16 matmul ran at half its f32 one.
//
// The f32 GEMM with B packed once (the ring's t row blocks against one weight, core/device.h:
// Device::pack_gemm_b): OpenBLAS packs B into its kernel's panels on every call, so t GEMMs of
// N/t rows pack the weight t times where one GEMM of N rows packs it once. oneDNN's f32 matmul
// takes its weights in a layout of its own choosing (memory::format_tag::any): one reorder into it
// (onednn_f32_pack), then every block's matmul reads the packed weight directly. Taken only where
// oneDNN picks a brgemm kernel that wants a layout other than the plain one (AVX-512 and up; on an
// AVX2 CPU oneDNN 2.6 runs a plain jit gemm, and there nothing is gained): else
// onednn_f32_layout answers nullptr and the caller stays on cblas_sgemm. TP_CPU_PACKED_GEMM=off
// (choose_packed_gemm) turns it off; auto (the default) takes it where it is.
//
// The plain f32 GEMM (f32_gemm): cblas_sgemm, except where OpenBLAS runs kernels without AVX-512
// on a CPU that has it because it does not know the CPU (OpenBLAS 0.3.21 runs a Xeon of model 207,
// Emerald Rapids, on its Prescott SSE3 kernels) — there oneDNN's brgemm runs the f32 GEMMs. Measured
// on that Xeon, one thread, the benchmark model's GEMM shapes (1024 x 768 x 256 ... 256 x 1024 x
// 1024): oneDNN 117-159 GFLOP/s, OpenBLAS's Prescott kernels 28-32, its SkylakeX kernels
// (OPENBLAS_CORETYPE=SkylakeX) 101-151. TP_CPU_F32_GEMM=auto|openblas|onednn (default auto: oneDNN
// only in that case, and never when OPENBLAS_CORETYPE chose the kernels). A call from inside an
// OpenMP parallel region (none in the project today) stays on cblas_sgemm: the process shares one
// oneDNN stream.
#pragma once

#include <cstdint>
#include <memory>
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

/// The f32 GEMM this process uses (read once: TP_CPU_F32_GEMM, OpenBLAS's kernels, oneDNN's ISA)
/// and a line naming it ("OpenBLAS (SkylakeX kernels)", "oneDNN (avx512_core; OpenBLAS's own pick,
/// Prescott, has no AVX-512 on this AVX-512 CPU)"). A bad value, or onednn in a build without
/// oneDNN, throws tp::Error naming the fix.
struct F32GemmChoice {
  bool onednn = false;
  std::string note;
  bool openblas_lacks_avx512 = false;  // blas.h: cpu::openblas_lacks_avx512, for the layers above
};
const F32GemmChoice& f32_gemm();
/// The choice itself, made anew from the environment on each call (f32_gemm keeps the first).
F32GemmChoice choose_f32_gemm();

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

/// Whether the CPU device packs a ring's weight for oneDNN (above): TP_CPU_PACKED_GEMM=auto (the
/// default: where oneDNN has a brgemm kernel) or off. A bad value throws tp::Error naming the fix.
bool choose_packed_gemm();

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
