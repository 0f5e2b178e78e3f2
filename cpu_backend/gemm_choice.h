// gemm_choice.h — which engine runs each GEMM of the CPU backend: the whole policy, in one place.
//
// The rule (each choice read once per process from the environment and the CPU; a bad value is
// one line naming the fix, exit 2; "onednn" in a build without oneDNN is refused the same way):
//   f32 GEMM   TP_CPU_F32_GEMM=auto|openblas|onednn (default auto). auto: OpenBLAS's cblas_sgemm,
//              except oneDNN's f32 matmul where OpenBLAS runs kernels without AVX-512 on a CPU that
//              has it (an OpenBLAS older than the CPU) and oneDNN's ISA has AVX-512; never when
//              OPENBLAS_CORETYPE chose OpenBLAS's kernels.
//   bf16 GEMM  TP_CPU_BF16_GEMM=auto|onednn|sgemm (default auto). auto: oneDNN's bf16 matmul where
//              its ISA has native bf16 (AVX512-BF16 or AMX), except AVX512-BF16 without AMX while
//              the f32 GEMM is oneDNN's; else the stand-in (bf16 widened to f32, the f32 GEMM above,
//              rounded back once).
//   packed B   TP_CPU_PACKED_GEMM=auto|off (default auto): a ring's weight packed once into
//              oneDNN's f32 layout where oneDNN picks a brgemm kernel for it (onednn_gemm.h,
//              onednn_f32_layout), else the f32 GEMM on every block.
//   No oneDNN in the build (Makefile, TP_HAVE_ONEDNN): OpenBLAS, the stand-in, nothing packed.
// Who asks: blas.cpp (cpu::sgemm, f32_gemm), cpu_device.cpp (the bf16 and packed choices, made
// with the device), peak_probe.cpp (the MFU probe runs, and the peak cache is keyed by, the f32
// engine), launcher/backends.cpp (the lines "bf16 GEMM: ..." and tp_bench's "INFO f32_gemm ...").
// The engines themselves: blas.cpp (OpenBLAS) and onednn_gemm.cpp (oneDNN).
//
// Why each exception (docs/model.md, "Precision", and docs/performance.md have the runs):
// - f32 on oneDNN: OpenBLAS 0.3.21 runs a Xeon of model 207 (Emerald Rapids) on its Prescott SSE3
//   kernels. There, one thread, the benchmark model's GEMM shapes (1024 x 768 x 256 ... 256 x 1024
//   x 1024): oneDNN 117-159 GFLOP/s, OpenBLAS's Prescott kernels 28-32, its SkylakeX kernels
//   (OPENBLAS_CORETYPE=SkylakeX) 101-151. A forced OPENBLAS_CORETYPE is the user's pick and kept.
// - bf16 on oneDNN only with a native bf16 ISA: below it oneDNN emulates bf16 and the stand-in
//   wins. And on AVX512-BF16 without AMX whose f32 GEMMs are oneDNN's, oneDNN's bf16 brgemm ran at
//   about half its f32 one (that Xeon without AMX exposed, one thread, the bench model's shapes:
//   79-89 against 149-172 GFLOP/s, B packed or not), so the stand-in, whose sgemm is that f32
//   matmul, is the faster of the two.
// - packed B: OpenBLAS packs B into its kernel's panels on every call, so t GEMMs of N/t rows pack
//   the weight t times where one GEMM of N rows packs it once; oneDNN reads a weight packed once.
//   On an AVX2 CPU oneDNN 2.6 runs a plain jit gemm, and there packing gains nothing.
// A call of cpu::sgemm from inside an OpenMP parallel region (none in the project today) stays on
// cblas_sgemm whatever the choice: the process shares one oneDNN stream.
#pragma once

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

/// Whether the CPU device packs a ring's weight for oneDNN: TP_CPU_PACKED_GEMM=auto (the default:
/// where oneDNN has a brgemm kernel, onednn_gemm.h) or off. A bad value throws tp::Error naming
/// the fix.
bool choose_packed_gemm();

}  // namespace tp::cpu
