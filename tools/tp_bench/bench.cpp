// bench.cpp — the registry, the timers, the RESULT line and the GEMM cases' sample check that
// tp_bench's suites share (bench.h).
#include "bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/log.h"
#include "observe/timer.h"

namespace tp::bench {

namespace {
// Function-local, so that a suite registering from its file's static initializer finds it built.
std::vector<Suite>& registry() {
  static std::vector<Suite> all;
  return all;
}
}  // namespace

bool register_suite(const Suite& suite) {
  registry().push_back(suite);
  return true;
}

std::vector<Suite> suites() {
  std::vector<Suite> out = registry();
  std::stable_sort(out.begin(), out.end(),
                   [](const Suite& a, const Suite& b) { return a.order < b.order; });
  return out;
}

double best_time(int reps, const std::function<void()>& f) {
  f();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = now();
    f();
    best = std::min(best, now() - t0);
  }
  return best;
}

double device_time(Device& dev, int reps, const std::function<void()>& f) {
  f();
  dev.synchronize();
  double t0 = now();
  f();
  dev.synchronize();
  const double one = std::max(now() - t0, 1e-7);
  const int inner = static_cast<int>(std::min(100.0, std::max(1.0, 0.02 / one)));
  double best = one;
  for (int i = 0; i < reps; ++i) {
    t0 = now();
    for (int j = 0; j < inner; ++j) f();
    dev.synchronize();
    best = std::min(best, (now() - t0) / inner);
  }
  return best;
}

void result(Context& ctx, const std::string& suite, const std::string& name, double value,
            const char* unit, double ref, double ratio) {
  char line[256];
  std::snprintf(line, sizeof line, "RESULT %s %s %.6g %s %.6g %.4f", suite.c_str(), name.c_str(),
                value, unit, ref, ratio);
  log0(ctx.world, line);
}

std::string precision(const Context& ctx) {
  if (ctx.options.get_text("dtype") == "bf16" || ctx.options.get_text("precision") == "bf16")
    return "bf16";
  return ctx.options.get_flag("tf32") ? "tf32" : "fp32";
}

std::pair<double, double> paired_median(const std::function<void()>& f,
                                        const std::function<void()>& g, int samples, int inner) {
  f();
  g();
  double t0 = now();
  f();
  if (inner <= 0)
    inner = static_cast<int>(std::min(1000.0, std::max(1.0, 0.01 / std::max(now() - t0, 1e-9))));
  std::vector<double> tf, tg;
  for (int s = 0; s < samples; ++s) {
    t0 = now();
    for (int i = 0; i < inner; ++i) f();
    tf.push_back((now() - t0) / inner);
    t0 = now();
    for (int i = 0; i < inner; ++i) g();
    tg.push_back((now() - t0) / inner);
  }
  std::sort(tf.begin(), tf.end());
  std::sort(tg.begin(), tg.end());
  return {tf[tf.size() / 2], tg[tg.size() / 2]};
}

GemmOperands::GemmOperands(Device& dev, const GemmCase& g, Dtype ab)
    : a(dev, g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, ab),
      b(dev, g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, ab),
      c(dev, Shape{g.m, g.n}) {
  dev.fill_random(a, RngKey::from(1, "a"), GlobalIndex::whole(a.cols()),
                  Distribution::uniform(-1, 1));
  dev.fill_random(b, RngKey::from(1, "b"), GlobalIndex::whole(b.cols()),
                  Distribution::uniform(-1, 1));
}

int sampled_wrong(const GemmCase& g, const Tensor& a, const Tensor& b, const Tensor& c, double tol,
                  int samples) {
  const auto ha = a.to_host(), hb = b.to_host(), hc = c.to_host();
  int wrong = 0;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int s = 0; s < samples; ++s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const int64_t i = static_cast<int64_t>(x % static_cast<uint64_t>(g.m));
    const int64_t j = static_cast<int64_t>((x >> 32) % static_cast<uint64_t>(g.n));
    double dot = 0, mag = 0;
    for (int64_t p = 0; p < g.k; ++p) {
      const double av = g.ta ? ha[p * g.m + i] : ha[i * g.k + p];
      const double bv = g.tb ? hb[j * g.k + p] : hb[p * g.n + j];
      dot += av * bv;
      mag += std::fabs(av * bv);
    }
    wrong += std::fabs(hc[i * g.n + j] - dot) > tol * mag + 1e-30;
  }
  return wrong;
}

}  // namespace tp::bench
