// gemm_gpu.cpp — tp_bench's GEMM suite on the GPU (the driver: main.cpp).
//
// GEMM on the GPU (--suite gemm with --backend gpu): TFLOP/s at the linear-layer shapes of a
// transformer with h = --hidden (4096) and --tokens (8192 = s 2048 · b 4) rows, forward and the
// two backward products, against a ceiling measured in the same run at the same precision: the
// best TFLOP/s of the same Device::gemm (cuBLAS) over the square sizes h, 2h and 3h. #wrong counts
// sampled elements off a double-precision dot product by more than the precision's bound. bf16:
// --dtype bf16 rounds f32 operands into scratch on each call; --precision bf16 gives the GEMM
// bf16 operand tensors, read as they are (the model's GEMMs under --precision bf16).
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench.h"
#include "core/log.h"

namespace tp::bench {
namespace {

void bench_gemm_gpu(Context& ctx) {
  Device& dev = ctx.device;
  const std::string prec = precision(ctx);
  const double tol = prec == "bf16" ? 1.6e-2 : prec == "tf32" ? 2e-3 : 1e-5;
  const int64_t h = ctx.options.get_int("hidden"), tokens = ctx.options.get_int("tokens");
  // --precision bf16: A and B are bf16 tensors, read by cuBLAS as they are (the model's GEMMs);
  // --dtype bf16 rounds f32 A and B into scratch first, each call.
  const Dtype ab = ctx.options.get_text("precision") == "bf16" ? Dtype::bf16 : Dtype::f32;
  auto run = [&](const GemmCase& g, int* wrong) {
    GemmOperands op(dev, g, ab);
    const double secs =
        device_time(dev, 5, [&] { dev.gemm(g.ta, g.tb, 1.0f, op.a, op.b, 0.0f, op.c); });
    if (wrong != nullptr) *wrong = sampled_wrong(g, op.a, op.b, op.c, tol, 64);
    return 2.0 * g.m * g.n * g.k / secs / 1e12;
  };
  log0(ctx.world, "# GEMM on ", dev.name(), ", ", prec,
       ": ceiling = best of Device::gemm at large square sizes");
  double ceiling = 0;
  for (int64_t n : {h, 2 * h, 3 * h}) {  // 4096, 8192, 12288 at the default h
    const double tf = run(GemmCase{"square", false, false, n, n, n}, nullptr);
    log0(ctx.world, "#   ", n, "^3: ", tf, " TFLOP/s");
    ceiling = std::max(ceiling, tf);
  }
  result(ctx, "gemm", prec + ".ceiling", ceiling, "TFLOP/s", ceiling, 1.0);
  log0(ctx.world, "#         layer (h = ", h, ", ", tokens,
       " tokens)       m      n      k   TFLOP/s   of ceiling   #wrong/64");
  const GemmCase cases[] = {
      {"qkv.fwd", false, false, tokens, 3 * h, h},  {"proj.fwd", false, false, tokens, h, h},
      {"fc1.fwd", false, false, tokens, 4 * h, h},  {"fc2.fwd", false, false, tokens, h, 4 * h},
      {"fc1.dgrad", false, true, tokens, h, 4 * h}, {"fc1.wgrad", true, false, h, 4 * h, tokens},
  };
  for (const GemmCase& g : cases) {
    int wrong = 0;
    const double tf = run(g, &wrong);
    char line[200];
    std::snprintf(line, sizeof line, "%30s %6lld %6lld %6lld %9.1f %11.0f%% %11d", g.name.c_str(),
                  static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), tf, 100.0 * tf / ceiling, wrong);
    log0(ctx.world, line);
    result(ctx, "gemm", prec + "." + g.name, tf, "TFLOP/s", ceiling, tf / ceiling);
    if (wrong != 0) result(ctx, "gemm", prec + "." + g.name + ".wrong", wrong, "of-64", 0, 0);
  }
}

// Which --suite values run it (bench.h, Suite).
bool selected(const std::string& suite, bool gpu) {
  return gpu && (suite == "cpu" || suite == "gemm" || suite == "all");
}

const bool registered = register_suite({2, selected, bench_gemm_gpu});

}  // namespace
}  // namespace tp::bench
