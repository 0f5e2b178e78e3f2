// test_flops.cpp — the model FLOPs per token behind MFU and HFU (model/flops.h): N is the model's
// matrix parameters, the PaLM formula with the recomputation terms, the FLOP/s per rank (serial).
#include <gtest/gtest.h>

#include <cstdint>

#include "core/communicator.h"
#include "model/config.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "test_util.h"

using tp::testing::device;

namespace tp {
namespace {

// N counts what token_flops says: every parameter of a t = 1 model but wpe (and, untied, wte's
// lookup table), for each activation and norm; the FLOPs follow 6·N + 12·L·h·S, and the HFU terms.
TEST(Flops, NIsTheModelsMatrixParametersAndThePaLMFormula) {
  SerialCommunicator solo;
  for (Activation act : {Activation::Gelu, Activation::SwiGlu})
    for (NormKind norm : {NormKind::LayerNorm, NormKind::RmsNorm})
      for (bool tied : {true, false}) {
        GptConfig cfg = tp::tiny_gpt(2);
        cfg.act = act;
        cfg.norm = norm;
        cfg.tied = tied;
        cfg.kv_heads = 4;  // GQA: c_attn is h + 2·kv·hd wide
        Gpt model(device(), solo, cfg);
        int64_t all = 0;
        for (const Param& p : model.params()) all += p.shape.numel();
        const int64_t lookups = cfg.seq * cfg.hidden + (tied ? 0 : cfg.vocab * cfg.hidden);
        const TokenFlops f = token_flops(cfg, 10);
        EXPECT_EQ(f.n, all - lookups)
            << activation_name(act) << " " << norm_name(norm) << " tied " << tied;
        EXPECT_DOUBLE_EQ(f.model, 6.0 * static_cast<double>(f.n) + 12.0 * 2 * 24 * 10);
        // the attention backward recomputes QKᵀ from the kept log-sum-exp: 2·L·h·S per token
        EXPECT_DOUBLE_EQ(f.hardware, f.model + 2.0 * 2 * 24 * 10);
      }
  GptConfig cfg = tp::tiny_gpt(3);
  const TokenFlops none = token_flops(cfg, 12);
  const double scores = 2.0 * 3 * 24 * 12;  // the backward's QKᵀ again, every mode
  EXPECT_DOUBLE_EQ(none.hardware, none.model + scores);
  cfg.recompute = Recompute::Selective;  // nothing left to rerun: attention keeps no S × S
  EXPECT_DOUBLE_EQ(token_flops(cfg, 12).hardware, none.hardware);
  cfg.recompute = Recompute::Full;
  const TokenFlops full = token_flops(cfg, 12);
  EXPECT_DOUBLE_EQ(full.model, none.model);  // MFU does not count the implementation's rerun
  EXPECT_DOUBLE_EQ(full.hardware, none.model + scores + 2.0 * static_cast<double>(none.n_blocks) +
                                      4.0 * 3 * 24 * 12);
  EXPECT_LT(none.n_blocks, none.n);
}

// The global model's FLOPs are divided over the ranks: t ranks doing 1/t of the work each in the
// same time as one rank doing all of it have the same FLOP/s per rank... divided by t.
TEST(Flops, PerRankDividesTheGlobalModelsWork) {
  EXPECT_DOUBLE_EQ(flops_per_rank(1e6, 512, 2.0, 1), 2.56e8);
  EXPECT_DOUBLE_EQ(flops_per_rank(1e6, 512, 2.0, 4), 6.4e7);
  EXPECT_DOUBLE_EQ(flops_per_rank(1e6, 512, 0.0, 4), 0.0);
}

}  // namespace
}  // namespace tp
