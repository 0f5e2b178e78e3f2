// test_agreement_mpi.cpp — core/agreement.h: every rank gets the lowest failing rank's own text, and a
// checkpoint write that fails on its one writing rank ends as the same message on every rank (not
// that rank alone while the others wait in the barrier it skipped).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "core/agreement.h"
#include "core/error.h"
#include "model/adamw.h"
#include "model/checkpoint.h"
#include "model/gpt.h"
#include "model_test_helpers.h"
#include "test_util.h"

namespace tp {
namespace {

using tp::testing::device;
using tp::testing::world;

TEST(Agreement, NoProblemAnywhereIsEmptyEverywhere) {
  EXPECT_EQ(agree_on_problem(world(), device(), ""), "");
}

TEST(Agreement, TheLowestFailingRanksOwnTextReachesEveryRank) {
  const int n = world().size(), r = world().rank();
  // Rank 0 has none; every other rank its own, long and not ASCII, so that the bytes and the
  // length travel intact and rank 1's (the lowest) is the one every rank gets.
  std::string mine;
  if (r > 0) mine = "rank " + std::to_string(r) + ": écrit ✗ " + std::string(3000, 'x');
  const std::string got = agree_on_problem(world(), device(), mine);
  if (n == 1)
    EXPECT_EQ(got, "");
  else
    EXPECT_EQ(got, "rank 1: écrit ✗ " + std::string(3000, 'x'));
}

TEST(Agreement, OutcomeOfAnActionOnOneRank) {
  const int last = world().size() - 1;
  int ran = 0;
  const std::string got = agree_on_outcome(world(), device(), world().rank() == last, [&] {
    ++ran;
    TP_CHECK(false, "cannot write x: No space left on device (ENOSPC)");
  });
  EXPECT_EQ(got, "cannot write x: No space left on device (ENOSPC)");
  EXPECT_EQ(ran, world().rank() == last ? 1 : 0);
  EXPECT_EQ(agree_on_outcome(world(), device(), true, [] {}), "");
}

// Rank 0 writes; its target is a folder, so only rank 0's write fails: every rank must come back
// (rank 0 after the barrier the others wait in) and hear the same message.
TEST(Agreement, FailedCheckpointWriteIsHeardOnEveryRank) {
  const GptConfig cfg = tp::small_gpt(8);
  Gpt model(device(), world(), cfg);
  model.init(1);
  AdamW opt(device(), model.params(), AdamWParams{});
  Tensor pid = Tensor::from_host(device(), Shape{1}, {static_cast<float>(getpid())});
  world().broadcast(pid, 0);
  const std::string dir = ::testing::TempDir() + "tp_test_agreement_" +
                          std::to_string(static_cast<long>(pid.to_host()[0])) + "_np" +
                          std::to_string(world().size());
  if (world().rank() == 0) ::mkdir(dir.c_str(), 0755);
  world().barrier();
  const std::string got = agree_on_outcome(world(), device(), true,
                                           [&] { save_checkpoint(dir, world(), model, opt, 1); });
  EXPECT_NE(got.find("cannot write checkpoint " + dir + ": it is a directory"), std::string::npos)
      << got;
  world().barrier();
  if (world().rank() == 0) ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace tp
