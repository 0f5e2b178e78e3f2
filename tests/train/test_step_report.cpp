// test_step_report.cpp — the lines tp_train prints about its steps (train/step_report.h): the
// progress line's fields, the --log-json line's keys, the held-out line, the header's MFU line
// (serial).
#include "train/step_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model/data.h"
#include "model/recompute.h"

namespace {

using tp::StepNumbers;

// Step 5: loss 2.5, 1,000 tokens in 0.5 s, 0.1 s of it communicating, 0.05 s exposed.
StepNumbers numbers() { return StepNumbers{5, 2.5f, 0.75, 0.001f, 2000.0, 0.1, 0.05, 0.5, 2, 1}; }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(StepReport, UtilisationAgainstThePeak) {
  StepNumbers n = numbers();
  tp::TokenFlops f;
  f.model = 1e6;
  f.hardware = 1e6;
  // 1,000 tokens · 1 MFLOP in 0.5 s over 2 ranks: 1 GFLOP/s per rank.
  tp::set_utilisation(n, f, 1000.0, 2, 4e9);
  EXPECT_DOUBLE_EQ(n.flops_rank, 1e9);
  EXPECT_DOUBLE_EQ(n.mfu, 0.25);
  EXPECT_EQ(n.hfu, -1);  // no recomputation: HFU = MFU, not printed
  f.hardware = 1.5e6;
  tp::set_utilisation(n, f, 1000.0, 2, 4e9);
  EXPECT_DOUBLE_EQ(n.hfu, 0.375);
  tp::set_utilisation(n, f, 1000.0, 2, 0);  // no peak: no MFU
  EXPECT_EQ(n.mfu, 0);
}

TEST(StepReport, ProgressLineFields) {
  StepNumbers n = numbers();
  n.flops_rank = 1e9;
  n.mfu = 0.25;
  EXPECT_EQ(tp::progress_line(n, false),
            "step     5 | loss 2.500000 | grad norm 0.7500 | lr 0.001 | 2000 tok/s | exposed comm "
            "10.0% | 1 GFLOP/s/rank, MFU 25%");
  n.hfu = 0.375;
  const std::string simulated = tp::progress_line(n, true);
  EXPECT_TRUE(contains(simulated, "exposed comm 10.0% (simulated link) | ")) << simulated;
  EXPECT_TRUE(contains(simulated, "MFU 25%, HFU 37.5%")) << simulated;
}

TEST(StepReport, JsonLineKeys) {
  StepNumbers n = numbers();
  n.flops_rank = 1e9;
  n.mfu = 0.25;
  const std::string line = tp::json_line(n);
  EXPECT_EQ(line,
            "{\"step\": 5, \"loss\": 2.5, \"grad_norm\": 0.75, \"lr\": 0.00100000005, "
            "\"tokens_per_s\": 2000, \"comm_s\": 0.1, \"exposed_s\": 0.05, \"compute_s\": 0.4, "
            "\"t\": 2, \"dp\": 1, \"flops_per_rank\": 1e+09, \"mfu\": 0.25, \"hfu\": 0.25}");
  n.val_loss = 2.75;
  n.hfu = 0.5;
  const std::string eval = tp::json_line(n);
  EXPECT_TRUE(contains(eval, "\"hfu\": 0.5, \"val_loss\": 2.75}")) << eval;
}

TEST(StepReport, ValidationLine) {
  StepNumbers n = numbers();
  n.val_loss = 2.75;
  const tp::MarkovSource markov(16, 1);
  const std::string line = tp::validation_line(n, markov, 4, 8);
  EXPECT_TRUE(contains(line, "step     5 | val loss 2.750000 | train loss 2.500000 | floor "))
      << line;
  EXPECT_TRUE(contains(line, " | 4 held-out batches of 8")) << line;
  if (std::isfinite(markov.loss_floor())) {
    EXPECT_TRUE(contains(line, "floor " + tp::fmt_g(markov.loss_floor()))) << line;
  }
}

TEST(StepReport, FlopsLineNamesTheFormulaAndThePeak) {
  tp::GptConfig cfg;
  cfg.vocab = 256;
  const std::string line = tp::flops_line(cfg, cfg.seq, 2, 5e10, "a test peak");
  EXPECT_EQ(line.rfind("MFU: model FLOPs per token 6·N + 12·L·h·S = ", 0), 0u) << line;
  EXPECT_TRUE(contains(line, "of the global model over 2 rank(s)")) << line;
  EXPECT_TRUE(contains(line, "; peak per rank 50 GFLOP/s = a test peak")) << line;
  // the attention backward recomputes its scores from the kept log-sum-exp, whatever --recompute
  EXPECT_TRUE(
      contains(line, "; HFU adds what is computed again (attention's scores in backward): "))
      << line;
  cfg.recompute = tp::Recompute::Full;
  EXPECT_TRUE(contains(tp::flops_line(cfg, cfg.seq, 2, 5e10, "a test peak"),
                       "(attention's scores in backward, --recompute full's forward): "));
}

}  // namespace
