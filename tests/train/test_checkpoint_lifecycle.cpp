// test_checkpoint_lifecycle.cpp — the checkpoints a run writes while it runs
// (train/checkpoint_lifecycle.h), on one rank (serial): --save-every's files pruned to --keep,
// the end-of-run file, the emergency file after a signal, a failed write's one line.
#include "train/checkpoint_lifecycle.h"

#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/checkpoint_series.h"
#include "model_test_helpers.h"
#include "test_util.h"
#include "train_test_helpers.h"

namespace {

namespace fs = std::filesystem;
using tp::CheckpointLifecycle;
using tp::Options;

// The steps of the series' files in `dir`, oldest first.
std::vector<int64_t> steps_in(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const tp::SeriesEntry& e : tp::CheckpointSeries(dir).list()) steps.push_back(e.step);
  return steps;
}

// One rank's run: its flags, a tiny model and its optimizer, and the lifecycle over them (which
// holds a reference to the flags: they live as long as it does).
struct OneRankRun {
  explicit OneRankRun(Options options)
      : o(std::move(options)),
        grid(solo, tp::GridAxes{1, 1}),
        model(tp::testing::device(), grid.tp(), tp::tiny_gpt(1)),
        opt(tp::testing::device(), model.params(), tp::AdamWParams{}),
        checkpoints(solo, tp::testing::device(), o, grid, model, opt,
                    tp::CheckpointOrigin{"test-run", "markov"}, "") {
    model.init(1);
  }
  Options o;
  tp::SerialCommunicator solo;
  tp::ProcessGrid grid;
  tp::Gpt model;
  tp::AdamW opt;
  CheckpointLifecycle checkpoints;
};

TEST(CheckpointLifecycle, PeriodicSavesKeepTheNewest) {
  const std::string dir = tp::testing::empty_test_folder("tp_lifecycle_");
  OneRankRun run(
      tp::testing::train_options({"--save", dir.c_str(), "--save-every", "2", "--keep", "2"}));
  std::vector<int64_t> saved;
  for (int64_t step = 1; step <= 7; ++step)
    if (run.checkpoints.periodic_save(step)) saved.push_back(step);
  EXPECT_EQ(saved, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_EQ(steps_in(dir), (std::vector<int64_t>{4, 6}));
  run.checkpoints.save_at_end(7);
  EXPECT_EQ(steps_in(dir), (std::vector<int64_t>{6, 7}));
}

TEST(CheckpointLifecycle, NoSaveEveryNoPeriodicFile) {
  const std::string dir = tp::testing::empty_test_folder("tp_lifecycle_");
  OneRankRun run(tp::testing::train_options({"--save", dir.c_str()}));
  EXPECT_FALSE(run.checkpoints.periodic_save(2));
  EXPECT_TRUE(steps_in(dir).empty());
}

TEST(CheckpointLifecycle, ASignalWritesAnEmergencyCheckpoint) {
  const std::string dir = tp::testing::empty_test_folder("tp_lifecycle_");
  OneRankRun run(tp::testing::train_options({"--save", dir.c_str()}));
  try {
    run.checkpoints.stop_after_signal(3, SIGTERM);
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 128 + SIGTERM);
    const std::string path = tp::CheckpointSeries(dir).final_path(3);
    EXPECT_EQ(std::string(e.what()), "stopped by SIGTERM before step 4: emergency checkpoint " +
                                         path + " saved at step 3 (resume with --load " + path +
                                         " or --resume auto)");
    EXPECT_TRUE(fs::exists(path));
    return;
  }
  ADD_FAILURE() << "stop_after_signal returned";
}

TEST(CheckpointLifecycle, ASignalWithoutSaveWritesNothing) {
  OneRankRun run(tp::testing::train_options({}));
  try {
    run.checkpoints.stop_after_signal(0, SIGINT);
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 128 + SIGINT);
    EXPECT_EQ(std::string(e.what()), "stopped by SIGINT before step 1: no --save: nothing written");
    return;
  }
  ADD_FAILURE() << "stop_after_signal returned";
}

TEST(CheckpointLifecycle, AFailedWriteIsOneLineNamingTheFlag) {
  const std::string dir = tp::testing::empty_test_folder("tp_lifecycle_");
  OneRankRun run(tp::testing::train_options({"--save", dir.c_str()}));
  try {
    run.checkpoints.write_agreed("--save", [] { throw tp::Error("the disk is full", 1); });
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("--save " + dir + ": ", 0), 0u) << m;
    EXPECT_NE(m.find("the disk is full; "), std::string::npos) << m;  // then what is intact
    return;
  }
  ADD_FAILURE() << "write_agreed did not throw";
}

}  // namespace
