// gemm.cpp — tp_bench's GEMM suite on the CPU (the driver: main.cpp).
//
// GEMM on the CPU (--suite gemm): Device::gemm (the project: the argument checks, then
// cblas_sgemm, or oneDNN's f32 matmul where OpenBLAS runs kernels without AVX-512 on a CPU that
// has it: cpu_backend/gemm_choice.h, f32_gemm) against cblas_sgemm called directly on the same
// buffers, at every GEMM of the linear layers and the head of tp_train's default model and of
// make bench's model (forward, input gradient, weight gradient); samples of the two alternate,
// and the ratio of their medians is the result (absolute times mean little on a shared machine).
// #wrong: among 1024 sampled elements, those off a double-precision dot product by more than
// 1e-5 · Σ_p |a_ip b_pj| (the fp32 rounding scale of the sum, which no choice of OpenBLAS
// kernels comes near, and which a missing or misplaced term exceeds). Before the layers, the
// ceiling: the best GFLOP/s of cblas_sgemm (and of Device::gemm where that is oneDNN's) at the
// square sizes 512, 1024 and 1536, at the same thread count.
// Then the same GEMMs in bf16 (bf16 A and B into f32 C, the CPU's bf16 GEMM: oneDNN where the
// CPU has native bf16, else sgemm on f32 stand-ins) against the fp32 Device::gemm on the same
// values: RESULT gemm_bf16 lines, the same #wrong test (the sums are fp32 in both).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "core/log.h"
#include "cpu_direct.h"

namespace tp::bench {
namespace {

// The GEMMs of one transformer layer stack at t = 1: for each linear (N tokens, in → out) the
// forward Y = X W (N × out × in), the input gradient dX = dY Wᵀ (N × in × out) and the weight
// gradient dW = Xᵀ dY (in × out × N); and the tied head, logits = X wteᵀ (N × V × h).
std::vector<GemmCase> model_gemms(const std::string& model, int64_t n, int64_t h, int64_t ffn,
                                  int64_t vocab) {
  std::vector<GemmCase> out;
  const struct {
    const char* layer;
    int64_t in, out;
  } linears[] = {{"qkv", h, 3 * h}, {"proj", h, h}, {"fc1", h, ffn}, {"fc2", ffn, h}};
  for (const auto& l : linears) {
    out.push_back({model + "." + l.layer + ".fwd", false, false, n, l.out, l.in});
    out.push_back({model + "." + l.layer + ".dgrad", false, true, n, l.in, l.out});
    out.push_back({model + "." + l.layer + ".wgrad", true, false, l.in, l.out, n});
  }
  out.push_back({model + ".head.fwd", false, true, n, vocab, h});
  return out;
}

// op(A) op(B) straight into OpenBLAS (cpu_backend/cpu_direct.h), on the project's buffers
// (row-major, as Device::gemm).
void direct_sgemm(const GemmCase& g, const Tensor& a, const Tensor& b, Tensor& c) {
  cpu::direct_sgemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a.data(), a.cols(), b.data(), b.cols(), 0.0f,
                    c.data(), c.cols());
}

// What this machine's f32 GEMM can do at this thread count: the best GFLOP/s of cblas_sgemm at three
// large square sizes (each the best of 5 calls after a warm-up), and of Device::gemm too where the
// CPU device runs its f32 GEMMs on oneDNN (f32_gemm_path), so that no row reads above its ceiling.
double sgemm_ceiling(Context& ctx) {
  bool onednn = false;
  f32_gemm_path(ctx.device, &onednn);
  double best = 0;
  for (int64_t n : {512, 1024, 1536}) {
    const GemmCase g{"square", false, false, n, n, n};
    GemmOperands op(ctx.device, g);
    double secs = best_time(5, [&] { direct_sgemm(g, op.a, op.b, op.c); });
    if (onednn)
      secs = std::min(
          secs, best_time(5, [&] { ctx.device.gemm(false, false, 1.0f, op.a, op.b, 0.0f, op.c); }));
    best = std::max(best, 2.0 * n * n * n / secs / 1e9);
  }
  return best;
}

// The same GEMMs with bf16 A and B into an f32 C (--precision bf16's GEMMs: f32 accumulation),
// through Device::gemm (the CPU's bf16 GEMM: oneDNN or sgemm on stand-ins, bf16_gemm_path),
// against the fp32 Device::gemm on the same values; interleaved, as above. RESULT gemm_bf16.
void bench_gemm_bf16(Context& ctx, const std::vector<GemmCase>& cases, double tol, int samples) {
  Device& dev = ctx.device;
  log0(ctx.world, "# bf16 GEMM (", bf16_gemm_path(dev),
       "): bf16 A, B into f32 C vs the fp32 Device::gemm on the same values, ",
       cpu::openmp_threads(), " thread(s)");
  log0(ctx.world,
       "#                 layer      m      n      k      bf16 GFLOP/s   fp32 GFLOP/s   ratio   "
       "#wrong");
  for (const GemmCase& g : cases) {
    GemmOperands op(dev, g);
    Tensor a16(dev, op.a.shape(), Dtype::bf16), b16(dev, op.b.shape(), Dtype::bf16);
    dev.convert(op.a, a16);
    dev.convert(op.b, b16);
    dev.convert(a16, op.a);  // the fp32 operands hold the bf16 values: the same product
    dev.convert(b16, op.b);
    Tensor c2(dev, Shape{g.m, g.n});
    const auto [bf16, fp32] =
        paired_median([&] { dev.gemm(g.ta, g.tb, 1.0f, a16, b16, 0.0f, op.c); },
                      [&] { dev.gemm(g.ta, g.tb, 1.0f, op.a, op.b, 0.0f, c2); });
    const int wrong = sampled_wrong(g, op.a, op.b, op.c, tol, samples);
    const double flop = 2.0 * g.m * g.n * g.k;
    char line[200];
    std::snprintf(line, sizeof line, "%23s %6lld %6lld %6lld %17.2f %14.2f %7.3f %8d",
                  g.name.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), flop / bf16 / 1e9, flop / fp32 / 1e9, fp32 / bf16,
                  wrong);
    log0(ctx.world, line);
    result(ctx, "gemm_bf16", g.name, flop / bf16 / 1e9, "GFLOP/s", flop / fp32 / 1e9, fp32 / bf16);
    result(ctx, "gemm_bf16", g.name + ".wrong", wrong, "count", samples, 0);
  }
}

void bench_gemm(Context& ctx) {
  Device& dev = ctx.device;
  constexpr double kTol = 1e-5;  // #wrong: |c - dot| > kTol · Σ_p |a_ip b_pj| (fp32 rounding scale)
  constexpr int kSamples = 1024;
  const int threads = cpu::openmp_threads();
  bool onednn = false;
  const std::string path = f32_gemm_path(dev, &onednn);
  const double ceiling = sgemm_ceiling(ctx);
  log0(ctx.world, "# sgemm ceiling, ", threads, " thread(s): best ",
       onednn ? "of cblas_sgemm and Device::gemm" : "cblas_sgemm",
       " at 512^3, 1024^3, 1536^3: ", ceiling, " GFLOP/s");
  result(ctx, "gemm", "ceiling", ceiling, "GFLOP/s", threads, 0);
  // The models: tp_train's defaults (h 64, s 64, b 8, V 256) and the benchmark model of
  // `make bench` (h 256, s 128, b 8, V 256).
  std::vector<GemmCase> cases = model_gemms("default", 64 * 8, 64, 256, 256);
  for (const GemmCase& g : model_gemms("bench", 128 * 8, 256, 1024, 256)) cases.push_back(g);
  log0(ctx.world, "# GEMM: Device::gemm (", path.empty() ? dev.backend() : path,
       ") vs cblas_sgemm called directly, ", threads,
       " thread(s); median of interleaved samples; #wrong of ", kSamples,
       " sampled elements off a double-precision dot product by > ", kTol, " sum |a b|");
  log0(ctx.world,
       "#                 layer      m      n      k   project GFLOP/s   cblas GFLOP/s   ratio   "
       "of ceiling   #wrong");
  for (const GemmCase& g : cases) {
    GemmOperands op(dev, g);
    Tensor c2(dev, Shape{g.m, g.n});
    // The same product, once through the project and once straight into OpenBLAS.
    const auto [project, direct] =
        paired_median([&] { dev.gemm(g.ta, g.tb, 1.0f, op.a, op.b, 0.0f, op.c); },
                      [&] { direct_sgemm(g, op.a, op.b, c2); });
    const int wrong = sampled_wrong(g, op.a, op.b, op.c, kTol, kSamples);
    const double flop = 2.0 * g.m * g.n * g.k;
    char line[200];
    std::snprintf(line, sizeof line, "%23s %6lld %6lld %6lld %17.2f %15.2f %7.3f %11.0f%% %8d",
                  g.name.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
                  static_cast<long long>(g.k), flop / project / 1e9, flop / direct / 1e9,
                  direct / project, 100.0 * flop / project / 1e9 / ceiling, wrong);
    log0(ctx.world, line);
    result(ctx, "gemm", g.name, flop / project / 1e9, "GFLOP/s", flop / direct / 1e9,
           direct / project);
    result(ctx, "gemm", g.name + ".wrong", wrong, "count", kSamples, 0);
  }
  bench_gemm_bf16(ctx, cases, kTol, kSamples);
}

// Which --suite values run it (bench.h, Suite).
bool selected(const std::string& suite, bool gpu) {
  return !gpu && (suite == "cpu" || suite == "gemm" || suite == "all");
}

const bool registered = register_suite({1, selected, bench_gemm});

}  // namespace
}  // namespace tp::bench
