// test_run_plan.cpp — tp_train's flags → a validated plan (train/run_plan.h), without MPI
// (serial): every problem at once, --resume's choices, --steps after a resume, the memory budget.
#include "train/run_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "train_test_helpers.h"

namespace {

using tp::Options;
using tp::Plan;

// plan_run's error message (exit 2), or a test failure when it plans without one.
std::string plan_problem(const Options& o, int world_size) {
  try {
    tp::plan_run(o, world_size);
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "plan_run found no problem";
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RunPlan, DefaultsPlanTheMarkovRun) {
  const Plan p = tp::plan_run(tp::testing::train_options({}), 2);
  EXPECT_EQ(p.t, 2);
  EXPECT_EQ(p.dp, 1);
  EXPECT_EQ(p.pp, 1);
  EXPECT_EQ(p.cfg.vocab, 256);  // --vocab 0: the Markov data's
  EXPECT_EQ(p.seq, 64);
  EXPECT_EQ(p.steps, 50);
  EXPECT_EQ(p.batch, 8);
  EXPECT_FALSE(p.resumed);
  EXPECT_EQ(p.origin.tokens, "markov");
  EXPECT_FALSE(p.origin.run_id.empty());
  ASSERT_EQ(p.origin_notes.size(), 1u);
  EXPECT_TRUE(contains(p.origin_notes[0], "(new)")) << p.origin_notes[0];
}

TEST(RunPlan, GridSplitsTheRanks) {
  const Plan p = tp::plan_run(
      tp::testing::train_options({"--dp", "2", "--pp", "2", "--micro-batches", "2"}), 8);
  EXPECT_EQ(p.t, 2);  // 8 ranks / (dp 2 · pp 2)
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.pp, 2);
}

TEST(RunPlan, SeveralBadFlagsGiveEveryProblemAtOnce) {
  const std::string m =
      plan_problem(tp::testing::train_options({"--warmup", "10", "--decay-steps", "5",
                                               "--save-every", "10", "--batch", "7", "--dp", "2"}),
                   4);
  EXPECT_TRUE(contains(m, "--decay-steps=5 must be above --warmup=10")) << m;
  EXPECT_TRUE(contains(m, "--save-every 10 needs --save")) << m;
  EXPECT_TRUE(contains(m, "--batch=7 is not divisible by --dp=2")) << m;
}

TEST(RunPlan, RefusesWhatDoesNotCombine) {
  const std::string m =
      plan_problem(tp::testing::train_options(
                       {"--dp", "2", "--dropout", "0.1", "--zero", "1", "--dump-grads", "g"}),
                   2);
  EXPECT_TRUE(contains(m, "--dropout with --dp > 1")) << m;
  EXPECT_TRUE(contains(m, "--dump-grads with --zero 1")) << m;
}

TEST(RunPlan, ResumeAutoWithAnEmptyFolderIsAProblem) {
  const std::string dir = tp::testing::empty_test_folder("tp_run_plan_");
  const std::string m =
      plan_problem(tp::testing::train_options({"--resume", "auto", "--save", dir.c_str()}), 1);
  EXPECT_TRUE(contains(m, "--resume auto: no checkpoint in")) << m;
}

TEST(RunPlan, ResumeAutoOrFreshWithAnEmptyFolderStartsFresh) {
  const std::string dir = tp::testing::empty_test_folder("tp_run_plan_");
  const Plan p = tp::plan_run(
      tp::testing::train_options({"--resume", "auto-or-fresh", "--save", dir.c_str()}), 1);
  EXPECT_FALSE(p.resumed);
  EXPECT_TRUE(p.load.empty());
  ASSERT_EQ(p.resume_notes.size(), 1u);
  EXPECT_TRUE(contains(p.resume_notes[0], "starting fresh")) << p.resume_notes[0];
  std::string note;
  EXPECT_EQ(tp::steps_to_run(p, 0, note), 50);  // a fresh start: --steps more
  EXPECT_EQ(note, "");
}

TEST(RunPlan, ResumeWithLoadIsRefused) {
  const std::string dir = tp::testing::empty_test_folder("tp_run_plan_");
  const std::string m =
      plan_problem(tp::testing::train_options(
                       {"--resume", "auto", "--save", dir.c_str(), "--load", "x.safetensors"}),
                   1);
  EXPECT_TRUE(contains(m, "give --resume auto or --load/--init-from, not both")) << m;
}

TEST(RunPlan, StepsAfterAResumeCountToTheEndStep) {
  Plan p;
  p.steps = 10;
  std::string note;
  EXPECT_EQ(tp::steps_to_run(p, 7, note), 10);  // --load or fresh: N more
  EXPECT_EQ(note, "");
  p.resumed = true;
  EXPECT_EQ(tp::steps_to_run(p, 7, note), 3);  // --resume: to step N
  EXPECT_EQ(note, "--resume: --steps 10 is the step the run ends at: 3 more from step 7");
  EXPECT_EQ(tp::steps_to_run(p, 12, note), 0);
  EXPECT_EQ(note,
            "--resume: the run is at step 12 and --steps 10 ends it there: nothing left to "
            "train");
}

TEST(RunPlan, MemoryBudget) {
  const Options o = tp::testing::train_options({"--memory-budget", "1"});
  EXPECT_EQ(tp::memory_budget_bytes(o), 1048576);
  EXPECT_EQ(tp::memory_budget_bytes(tp::testing::train_options({})), 0);
  const Plan p = tp::plan_run(o, 1);
  const tp::MemoryChoice c = tp::memory_choice(p);
  EXPECT_EQ(c.t, 1);
  EXPECT_EQ(c.dp, 1);
  try {
    tp::check_memory_budget(o, p, 1);
    ADD_FAILURE() << "1 MiB holds the default model";
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
  }
  const Options roomy = tp::testing::train_options({"--memory-budget", "100000"});
  EXPECT_NO_THROW(tp::check_memory_budget(roomy, tp::plan_run(roomy, 1), 1));
}

}  // namespace
