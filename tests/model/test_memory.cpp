// test_memory.cpp — the closed form of a block's activation memory (model/memory.h) against
// Korthikanti et al.'s table: with attention keeping only its log-sum-exp (no S × S tensor), a
// GPT-2-shaped block in bf16 keeps Korthikanti's FlashAttention row (their selective-recomputation
// row) plus exactly what this library stores wider or in addition: 4-byte dropout masks for their
// 1-byte ones, the norms' f32 statistics, and attention's f32 log-sum-exp.
#include <gtest/gtest.h>

#include <cstdint>

#include "model/memory.h"
#include "model/presets.h"

namespace {

using tp::GptConfig;

TEST(ActivationMemory, GptTwoShapeIsKorthikantisFlashRowPlusTheLibrarysExtras) {
  const int64_t s = 64, b = 2, h = 96, a = 4;  // nkv = nh, ffn = 4h, GeLU, LayerNorm
  for (bool sp : {false, true})
    for (int t : {1, 2, 4}) {
      GptConfig c = tp::gpt_shape(2, h, a, 0, 0, 64, s);
      c.dropout = 0.1f;
      c.precision = tp::Precision::Bf16;
      c.sp = sp;
      const int64_t sbh = s * b * h, sb = s * b;
      const int64_t shard = sp ? t : 1;  // what SP divides by t too
      // Korthikanti: sbh(10 + 24/t) (TP) or sbh·34/t (TP + SP), in bytes, 16-bit, 1-byte masks.
      const int64_t korthikanti = sp ? 34 * sbh / t : 10 * sbh + 24 * sbh / t;
      const int64_t masks = 2 * 3 * sbh / shard;     // two n·h masks at 4 B instead of 1 B
      const int64_t stats = 2 * 2 * 4 * sb / shard;  // ln_1, ln_2: μ and rstd per token, f32
      const int64_t lse = 4 * (a / t) * sb;          // per query row of this rank's heads, f32
      EXPECT_EQ(tp::block_activation_bytes(c, s, b, t), korthikanti + masks + stats + lse)
          << "t = " << t << (sp ? " with SP" : "");
      // and no term in s²: doubling s doubles the block's bytes
      EXPECT_EQ(tp::block_activation_bytes(c, 2 * s, b, t),
                2 * tp::block_activation_bytes(c, s, b, t));
    }
}

}  // namespace
