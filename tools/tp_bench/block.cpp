// block.cpp — tp_bench's transformer block suite (the driver: main.cpp).
//
// One transformer block forward + backward (--suite block) at h = --hidden, s = --seq (2048),
// b = --batch (1), --heads (32), ffn = 4h: milliseconds, and the model TFLOP/s they imply.
// --precision bf16 runs it in tp_train's mixed precision (bf16 weight copies, activations and
// their gradients, fp32 weight gradients and statistics; RESULT names "bf16.*"), where --dtype
// bf16 alone only rounds fp32 GEMMs' inputs ("bf16in.*" for the block).
// scripts/bench_block_torch.py times the same block in PyTorch eager for the ratio (--bf16:
// under torch.autocast(dtype=torch.bfloat16)).
#include <cmath>
#include <string>

#include "bench.h"
#include "core/log.h"
#include "model/config.h"
#include "model/gpt.h"
#include "parallel/param.h"

namespace tp::bench {
namespace {

void bench_block(Context& ctx) {
  Device& dev = ctx.device;
  const bool mixed = ctx.options.get_text("precision") == "bf16";
  const std::string label = mixed                      ? "bf16"
                            : precision(ctx) == "bf16" ? "bf16in"  // --dtype bf16: GEMM inputs only
                                                       : precision(ctx);
  GptConfig cfg;
  cfg.precision = mixed ? Precision::Bf16 : Precision::Fp32;
  cfg.layers = 1;
  cfg.hidden = ctx.options.get_int("hidden");
  cfg.heads = ctx.options.get_int("heads");
  cfg.ffn = 4 * cfg.hidden;
  cfg.seq = ctx.options.get_int("seq");
  cfg.vocab = 256;
  const int64_t seq = cfg.seq, batch = ctx.options.get_int("batch"), n = seq * batch,
                h = cfg.hidden;
  cfg.validate(ctx.world.size());
  TransformerBlock block(dev, ctx.world, cfg, 0);
  ParamList params;
  block.collect_params(params, cfg.init_std, cfg.init_std / std::sqrt(2.0f));
  init_params(dev, params, 1);
  refresh_compute_copies(dev, params);  // bf16: the weights' bf16 copies (fp32: nothing)
  zero_grads(dev, params);
  Tensor x(dev, Shape{n, h}, cfg.compute_dtype()), dy(dev, Shape{n, h}, cfg.compute_dtype());
  dev.fill_random(x, RngKey::from(2, "x"), GlobalIndex::whole(h), Distribution::normal(0, 1));
  dev.fill_random(dy, RngKey::from(2, "dy"), GlobalIndex::whole(h), Distribution::normal(0, 1));
  const double fwd = device_time(dev, 5, [&] { block.forward(x, seq, batch, 1, 0); });
  const double both = device_time(dev, 5, [&] {
    block.forward(x, seq, batch, 1, 0);
    block.backward(dy);
  });
  // Model FLOPs of the block (t = 1): 24·n·h² for the four linears (qkv 3h², proj h², MLP 8h²)
  // forward, and 4·n·s·h for QKᵀ and PV over the full (causal but materialised) S × S; backward
  // is twice the forward.
  const double flop_fwd =
      24.0 * n * h * h / ctx.world.size() + 4.0 * batch * seq * seq * h / ctx.world.size();
  log0(ctx.world, "# transformer block on ", dev.name(), " (", label, "), h = ", h, ", s = ", seq,
       ", b = ", batch, ", ", cfg.heads, " heads, t = ", ctx.world.size(), ": forward ", fwd * 1e3,
       " ms, forward + backward ", both * 1e3, " ms (", 3.0 * flop_fwd / both / 1e12,
       " TFLOP/s), peak ", static_cast<double>(dev.memory().peak) / (1 << 20), " MiB");
  result(ctx, "block", label + ".fwd_ms", fwd * 1e3, "ms", 0, 0);
  result(ctx, "block", label + ".fwd_bwd_ms", both * 1e3, "ms", 0, 0);
}

// Which --suite values run it (bench.h, Suite), on either backend.
bool selected(const std::string& suite, bool /*gpu*/) { return suite == "all" || suite == "block"; }

const bool registered = register_suite({5, selected, bench_block});

}  // namespace
}  // namespace tp::bench
