// test_file_shape.cpp — a model file's shape merged with the shape flags (model/file_shape.h): the
// file's shape when no flag is given, each disagreeing flag named, flags overriding a checkpoint,
// the sequence length against the position table (serial).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/options.h"
#include "model/file_shape.h"

namespace {

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
