// test_run_outputs.cpp — the files a run writes besides its checkpoints (train/run_outputs.h) and
// the data and starting step of what it trains (train/trainee.h), on one rank (serial).
#include "train/run_outputs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "train/run_plan.h"
#include "train/trainee.h"
#include "train_test_helpers.h"

namespace {

namespace fs = std::filesystem;
using tp::Options;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(RunOutputs, SvgBesideTheTrace) {
  EXPECT_EQ(tp::svg_path("run.json"), "run.svg");
  EXPECT_EQ(tp::svg_path("dir/run.trace"), "dir/run.trace.svg");
  EXPECT_EQ(tp::svg_path(".json"), ".json.svg");
}

TEST(RunOutputs, ExportProbeIsTheFirstMissingFolder) {
  const std::string dir = tp::testing::empty_test_folder("tp_run_outputs_");
  EXPECT_EQ(tp::export_probe(dir), dir.substr(0, dir.size() - 1) + "/config.json");  // exists
  EXPECT_EQ(tp::export_probe(dir + "a/b/c"), dir + "a");  // export_hf creates a/b/c
}

TEST(RunOutputs, EveryOutputPathWithItsFlag) {
  const std::string dir = tp::testing::empty_test_folder("tp_run_outputs_");
  const Options o =
      tp::testing::train_options({"--save", (dir + "run.safetensors").c_str(), "--plot", "p.svg"});
  const auto paths = tp::run_output_paths(o, "t.json", "");
  ASSERT_EQ(paths.size(), 7u);
  EXPECT_EQ(paths[0].first, "--save");
  EXPECT_EQ(paths[0].second, dir + "run.safetensors");
  EXPECT_EQ(paths[4].first, "--trace (its SVG)");
  EXPECT_EQ(paths[4].second, "t.svg");
  EXPECT_EQ(paths[5].second, "p.svg");
  EXPECT_EQ(paths[6].second, "");  // no --export-hf: skipped
}

TEST(RunOutputs, PlaceholdersBeforeTheFirstStep) {
  const std::string dir = tp::testing::empty_test_folder("tp_run_outputs_");
  tp::SerialCommunicator solo;
  const std::string log = dir + "log.jsonl", plot = dir + "loss.svg", trace = dir + "run.json";
  tp::OutputFile json = tp::open_outputs(solo, log, plot, trace, 5, -1);
  EXPECT_TRUE(json.is_open());
  EXPECT_NE(read(plot).find("tp_train writes this file when it ends"), std::string::npos);
  EXPECT_EQ(read(trace), "{\"traceEvents\": []}\n");
  EXPECT_TRUE(fs::exists(dir + "run.svg"));
  json.close();
}

TEST(Trainee, StartFromNothingIsStepZero) {
  tp::SerialCommunicator solo;
  const tp::Plan plan = tp::plan_run(
      tp::testing::train_options({"--layers", "1", "--hidden", "16", "--heads", "2"}), 1);
  const tp::Trainee t =
      tp::build(tp::testing::device(), solo, plan.cfg, tp::StageLayout{}, plan.seed, {});
  EXPECT_EQ(tp::start_from(solo, solo, plan, *t.model, *t.opt), 0);
  const auto source = tp::token_source(plan, 0.05);
  EXPECT_NE(source->describe().find("Markov"), std::string::npos) << source->describe();
}

TEST(Trainee, StepsPastTheLastNumberedStepAreRefused) {
  tp::SerialCommunicator solo;
  tp::Plan plan = tp::plan_run(
      tp::testing::train_options({"--layers", "1", "--hidden", "16", "--heads", "2"}), 1);
  const tp::Trainee t =
      tp::build(tp::testing::device(), solo, plan.cfg, tp::StageLayout{}, plan.seed, {});
  plan.steps = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_THROW(tp::start_from(solo, solo, plan, *t.model, *t.opt), tp::Error);
}

}  // namespace
