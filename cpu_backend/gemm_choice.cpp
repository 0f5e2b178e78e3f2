// gemm_choice.cpp — the CPU backend's GEMM policy (gemm_choice.h has the rule and its reasons):
// the environment and the CPU in, an engine and the line naming it out. What oneDNN would run on
// this CPU it asks onednn_gemm.h (onednn_isa), so that this file builds the same with or without
// oneDNN.
#include "gemm_choice.h"

#include <cstdlib>
#include <string>

#include "blas.h"
#include "core/error.h"
#include "cpu_direct.h"
#include "onednn_gemm.h"

namespace tp::cpu {

namespace {

// The value of environment variable `name`, "auto" when unset or empty.
std::string wanted(const char* name) {
  const char* env = std::getenv(name);
  return env && *env ? env : "auto";
}

// "onednn" asked of a build without it: one line naming the way out (`other`).
void check_onednn_built(const char* variable, const char* other) {
  TP_CHECK_INPUT(have_onednn(), variable,
                 "=onednn, but this build has no oneDNN; install libdnnl-dev and rebuild (make), "
                 "or use ",
                 variable, "=", other);
}

F32GemmChoice pick_f32_gemm() {
  const std::string want = wanted("TP_CPU_F32_GEMM");
  TP_CHECK_INPUT(want == "auto" || want == "openblas" || want == "onednn", "TP_CPU_F32_GEMM=", want,
                 " is not a CPU f32 GEMM; use openblas, onednn or auto");
  const std::string core = openblas_core();
  const std::string blas = "OpenBLAS (" + core + " kernels";
  if (want == "openblas") return {false, blas + ", TP_CPU_F32_GEMM=openblas)"};
  const OnednnIsa isa = onednn_isa();
  if (want == "onednn") {
    check_onednn_built("TP_CPU_F32_GEMM", "openblas");
    return {true, "oneDNN (" + isa.name + ", TP_CPU_F32_GEMM=onednn)"};
  }
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (forced && *forced) return {false, blas + ", OPENBLAS_CORETYPE=" + forced + ")"};
  if (openblas_lacks_avx512() && isa.avx512)
    return {true, "oneDNN (" + isa.name + "; OpenBLAS's own pick, " + core +
                      ", has no AVX-512 on this AVX-512 CPU)"};
  return {false, blas + ")"};
}

}  // namespace

F32GemmChoice choose_f32_gemm() {
  F32GemmChoice choice = pick_f32_gemm();
  choice.openblas_lacks_avx512 = openblas_lacks_avx512();
  return choice;
}

const F32GemmChoice& f32_gemm() {
  static const F32GemmChoice choice = choose_f32_gemm();
  return choice;
}

bool choose_packed_gemm() {
  const std::string want = wanted("TP_CPU_PACKED_GEMM");
  TP_CHECK_INPUT(want == "auto" || want == "off", "TP_CPU_PACKED_GEMM=", want,
                 " is not a choice; use auto (pack a ring's weight for oneDNN where it has a "
                 "brgemm kernel) or off (cblas_sgemm on every block)");
  return want == "auto" && have_onednn();
}

Bf16GemmChoice choose_bf16_gemm() {
  const std::string want = wanted("TP_CPU_BF16_GEMM");
  TP_CHECK_INPUT(want == "auto" || want == "onednn" || want == "sgemm", "TP_CPU_BF16_GEMM=", want,
                 " is not a CPU bf16 GEMM; use onednn, sgemm or auto");
  const std::string standin = "sgemm on f32 stand-ins";
  if (want == "sgemm") return {Bf16Gemm::sgemm, standin + " (TP_CPU_BF16_GEMM=sgemm)"};
  if (!have_onednn()) {
    if (want == "onednn") check_onednn_built("TP_CPU_BF16_GEMM", "sgemm");
    return {Bf16Gemm::sgemm, standin + " (built without oneDNN)"};
  }
  const OnednnIsa isa = onednn_isa();
  if (want == "onednn")
    return {Bf16Gemm::onednn, "oneDNN (" + isa.name + ", TP_CPU_BF16_GEMM=onednn)"};
  if (isa.native_bf16 && !isa.amx && f32_gemm().onednn)
    return {Bf16Gemm::sgemm, standin + " (oneDNN's f32 matmul; its " + isa.name +
                                 " bf16 one runs at about half that rate without AMX)"};
  if (isa.native_bf16) return {Bf16Gemm::onednn, "oneDNN (" + isa.name + ")"};
  return {Bf16Gemm::sgemm,
          standin + " (oneDNN's ISA " + isa.name + " has no native bf16: it would emulate)"};
}

}  // namespace tp::cpu
