// attention.cpp — tp_bench's attention suite (the driver: main.cpp).
//
// Causal attention (--suite attention): Device::attention_forward and attention_backward, one
// (batch 1, 8 heads) call each at s = 128, 512 and 2048 and head dim 32 and 64, in ms per call
// and GFLOP/s of the causal work the math needs: forward 2·s²·hd per head (QKᵀ and PV over the
// lower triangle, 2 FLOPs a multiply-add), backward 2.5× that (dP, dq, dk, dv and the recomputed
// scores). The reference column is the same kernel's forward time: the backward's ratio to it.
// Nothing of size s × s is kept between the two calls (the forward keeps a log-sum-exp per row).
#include <cmath>
#include <cstdio>
#include <string>

#include "bench.h"
#include "core/log.h"

namespace tp::bench {
namespace {

void bench_attention(Context& ctx) {
  Device& dev = ctx.device;
  const int64_t B = 1, nh = 8;
  log0(ctx.world, "# causal attention on ", dev.name(), ", batch ", B, ", ", nh,
       " heads (MHA), fp32: ms per call (best of 5) and GFLOP/s of the causal work");
  log0(ctx.world, "#     s   hd   forward ms  GFLOP/s   backward ms  GFLOP/s   bwd/fwd");
  for (int64_t S : {128, 512, 2048})
    for (int64_t hd : {32, 64}) {
      const AttentionShape sh{S, B, nh, nh, hd, 1.0f / std::sqrt(static_cast<float>(hd))};
      const int64_t rows = S * B, cols = nh * hd;
      Tensor q(dev, Shape{rows, cols}), k(dev, Shape{rows, cols}), v(dev, Shape{rows, cols}),
          out(dev, Shape{rows, cols}), dout(dev, Shape{rows, cols}), dq(dev, Shape{rows, cols}),
          dk(dev, Shape{rows, cols}), dv(dev, Shape{rows, cols}), lse(dev, Shape{B, nh, S});
      for (Tensor* t : {&q, &k, &v, &dout})
        dev.fill_random(*t, RngKey::from(7, "attention"), GlobalIndex::whole(t->cols()),
                        Distribution::uniform(-1, 1));
      const double fwd = device_time(dev, 5, [&] { dev.attention_forward(out, lse, q, k, v, sh); });
      const double bwd = device_time(
          dev, 5, [&] { dev.attention_backward(dq, dk, dv, dout, q, k, v, out, lse, sh); });
      const double flops = 2.0 * static_cast<double>(S * S) * hd * nh * B;  // causal forward
      char line[160];
      std::snprintf(line, sizeof line, "%7lld %4lld %12.3f %8.1f %13.3f %8.1f %9.2f",
                    static_cast<long long>(S), static_cast<long long>(hd), fwd * 1e3,
                    flops / fwd / 1e9, bwd * 1e3, 2.5 * flops / bwd / 1e9, bwd / fwd);
      log0(ctx.world, line);
      const std::string name = "s" + std::to_string(S) + ".hd" + std::to_string(hd);
      result(ctx, "attention", name + ".fwd", fwd * 1e3, "ms", fwd * 1e3, 1.0);
      result(ctx, "attention", name + ".bwd", bwd * 1e3, "ms", fwd * 1e3, bwd / fwd);
    }
}

// Which --suite values run it (bench.h, Suite), on either backend: only when asked for by name
// (not in "all" yet: scripts/bench.py and scripts/gpu-check.sh do not read its rows).
bool selected(const std::string& suite, bool /*gpu*/) { return suite == "attention"; }

const bool registered = register_suite({7, selected, bench_attention});

}  // namespace
}  // namespace tp::bench
