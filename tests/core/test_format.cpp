// test_format.cpp — what the programs compute and print through lib/ instead of their own copies:
// the number formats (core/format.h), the median of timings (observe/timer.h), the learning rate
// schedule (model/schedule.h) and a model file's shape merged with the flags (model/file_shape.h)
// (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/format.h"
#include "core/options.h"
#include "model/file_shape.h"
#include "model/schedule.h"
#include "observe/timer.h"

namespace {

using tp::LrSchedule;

TEST(Format, ScientificAndFixed) {
  EXPECT_EQ(tp::sci(0.000123), "1.23e-04");
  EXPECT_EQ(tp::sci(-5.0, 1), "-5.0e+00");
  EXPECT_EQ(tp::fixed(2.346, 2), "2.35");
  EXPECT_EQ(tp::fixed(5.123456789, 5), "5.12346");
  EXPECT_EQ(tp::fixed(7.0, 0), "7");
  EXPECT_EQ(tp::fmt_g(0.5), "0.5");
  EXPECT_EQ(tp::fmt_g(3.14159), "3.142");
  EXPECT_EQ(tp::fmt_g(12346.0), "1.235e+04");
}

TEST(Format, BinaryUnits) {
  EXPECT_EQ(tp::mib(3.0 * 1048576), "3.0 MiB");
  EXPECT_EQ(tp::mib(12.5 * 1048576, 0), "12 MiB");  // %.0f rounds half to even
  EXPECT_EQ(tp::mib(64.0 * 1048576, 0), "64 MiB");
  EXPECT_EQ(tp::gib(1.5 * 1073741824.0), "1.5 GiB");
  EXPECT_EQ(tp::gib(0.0123 * 1073741824.0), "0.0123 GiB");
  EXPECT_EQ(tp::kib_mib(512), "512 B");
  EXPECT_EQ(tp::kib_mib(1023), "1023 B");
  EXPECT_EQ(tp::kib_mib(1536), "1.5 KiB");
  EXPECT_EQ(tp::kib_mib(2.25 * 1048576), "2.2 MiB");  // 2.25 is exact: half to even again
}

TEST(Format, Percent) {
  EXPECT_EQ(tp::pct(0.373), "37 %");
  EXPECT_EQ(tp::pct(1.0), "100 %");
  EXPECT_EQ(tp::pct(0.0), "0 %");
}

TEST(Timer, MedianIsTheMiddleOfTheSorted) {
  EXPECT_EQ(tp::median({}), 0.0);
  EXPECT_EQ(tp::median({3.0}), 3.0);
  EXPECT_EQ(tp::median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(tp::median({4.0, 1.0, 3.0, 2.0}), 3.0);  // the upper middle of an even count
}

TEST(Timer, NowAdvances) {
  const double a = tp::now();
  volatile double x = 0;
  for (int i = 0; i < 100000; ++i) x = x + 1;
  EXPECT_GT(tp::now(), a);
}

TEST(Schedule, ConstantWithoutWarmupOrDecay) {
  const LrSchedule s{2e-3f, 0, 0};
  for (int64_t step : {0, 1, 100}) EXPECT_EQ(tp::learning_rate(s, step), 2e-3f);
}

TEST(Schedule, LinearWarmupThenConstant) {
  const LrSchedule s{1e-3f, 4, 0};
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 0), 0.25e-3f);
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 1), 0.5e-3f);
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 3), 1e-3f);
  EXPECT_EQ(tp::learning_rate(s, 4), 1e-3f);
  EXPECT_EQ(tp::learning_rate(s, 1000), 1e-3f);
}

TEST(Schedule, CosineDecayToTenPercent) {
  const LrSchedule s{1e-3f, 2, 12};
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 2), 1e-3f);     // x = 0: the peak
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 7), 0.55e-3f);  // x = ½: halfway between 1 and 0.1
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 12), 1e-4f);    // x = 1: 10 %
  EXPECT_FLOAT_EQ(tp::learning_rate(s, 50), 1e-4f);    // and stays there
  float prev = tp::learning_rate(s, 2);
  for (int64_t step = 3; step <= 12; ++step) {
    const float lr = tp::learning_rate(s, step);
    EXPECT_LT(lr, prev) << "step " << step;
    prev = lr;
  }
}

TEST(Schedule, DecayNotAboveWarmupMeansNone) {
  const LrSchedule s{1e-3f, 5, 5};
  EXPECT_EQ(tp::learning_rate(s, 5), 1e-3f);
  EXPECT_EQ(tp::learning_rate(s, 100), 1e-3f);
}

// The shape flags as tp_train declares them, parsed from `args`; cfg holds their values.
struct Flags {
  tp::Options o{"prog", "shape flags"};
  tp::GptConfig cfg;
  int64_t seq = 0;
  explicit Flags(std::vector<const char*> args) {
    o.integer("layers", 2, "").integer("hidden", 64, "").integer("heads", 4, "");
    o.integer("kv-heads", 0, "").integer("ffn", 0, "").integer("vocab", 0, "");
    o.integer("seq", 64, "").text("act", "gelu", "").text("norm", "layernorm", "");
    o.flag("untie", "").real("dropout", 0, "").flag("sp", "").text("overlap", "none", "");
    o.text("recompute", "none", "");
    o.integer("pad-vocab-multiple", 1, "");
    args.insert(args.begin(), "prog");
    o.parse(static_cast<int>(args.size()), args.data());
    cfg = tp::config_from_flags(o);
    seq = cfg.seq;
  }
};

// A file of another shape than the flags' defaults (its config made by the same flags).
tp::ModelFile file(bool hub) {
  tp::ModelFile f;
  f.path = "f.safetensors";
  f.hub = hub;
  f.config = Flags({"--layers", "3", "--hidden", "96", "--heads", "6", "--ffn", "384", "--vocab",
                    "300", "--seq", "128", "--act", "swiglu", "--norm", "rmsnorm", "--untie"})
                 .cfg;
  return f;
}

TEST(FileShape, NoFlagsTakeTheFileShape) {
  for (tp::FileShape rule : {tp::FileShape::FlagsMustAgree, tp::FileShape::FlagsOverride}) {
    Flags fl({});
    std::vector<std::string> problems;
    tp::shape_from_file(file(false), fl.o, rule, fl.cfg, fl.seq, problems);
    EXPECT_TRUE(problems.empty());
    EXPECT_EQ(fl.cfg.layers, 3);
    EXPECT_EQ(fl.cfg.hidden, 96);
    EXPECT_EQ(fl.cfg.heads, 6);
    EXPECT_EQ(fl.cfg.kv_heads, 0);  // = heads
    EXPECT_EQ(fl.cfg.ffn, 384);
    EXPECT_EQ(fl.cfg.vocab, 300);
    EXPECT_EQ(fl.cfg.act, tp::Activation::SwiGlu);
    EXPECT_EQ(fl.cfg.norm, tp::NormKind::RmsNorm);
    EXPECT_FALSE(fl.cfg.tied);
    EXPECT_EQ(fl.cfg.seq, 128);
    EXPECT_EQ(fl.seq, 128);  // a checkpoint: the length it was saved with
  }
}

TEST(FileShape, FlagsMustAgreeNamesEachOneThatDiffers) {
  Flags fl({"--heads", "8", "--layers", "3", "--norm", "layernorm"});
  std::vector<std::string> problems;
  tp::shape_from_file(file(false), fl.o, tp::FileShape::FlagsMustAgree, fl.cfg, fl.seq, problems);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0], "--heads=8 disagrees with f.safetensors (6); drop --heads");
  EXPECT_EQ(problems[1], "--norm=layernorm disagrees with f.safetensors (rmsnorm); drop --norm");
  EXPECT_EQ(fl.cfg.heads, 6);  // the file's shape all the same
  EXPECT_EQ(fl.cfg.norm, tp::NormKind::RmsNorm);
}

TEST(FileShape, FlagsOverrideACheckpoint) {
  Flags fl({"--heads", "8", "--seq", "32"});
  std::vector<std::string> problems;
  tp::shape_from_file(file(false), fl.o, tp::FileShape::FlagsOverride, fl.cfg, fl.seq, problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(fl.cfg.heads, 8);   // given: kept
  EXPECT_EQ(fl.cfg.layers, 3);  // not given: the file's
  EXPECT_EQ(fl.seq, 32);        // shorter sequences than the table
  EXPECT_EQ(fl.cfg.seq, 128);   // the whole position table stays
}

TEST(FileShape, SequenceLength) {
  Flags longer({"--seq", "256"});
  std::vector<std::string> problems;
  tp::shape_from_file(file(false), longer.o, tp::FileShape::FlagsOverride, longer.cfg, longer.seq,
                      problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "--seq=256 is larger than the position table of 128 in f.safetensors");
  Flags hub({});  // --seq's default, 64: a Hugging Face file keeps it when the table is longer
  problems.clear();
  tp::shape_from_file(file(true), hub.o, tp::FileShape::FlagsMustAgree, hub.cfg, hub.seq, problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(hub.seq, 64);
  EXPECT_EQ(hub.cfg.seq, 128);
}

}  // namespace
