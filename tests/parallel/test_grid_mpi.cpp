// test_grid_mpi.cpp — ProcessGrid (lib/parallel/process_grid.h) and training on a tp × dp grid.
//
//   membership  for every dp that divides np: coordinates, group sizes, and the members each split
//               communicator really contains (an all-reduce of one-hot rank vectors) = the formula;
//               the same for every pp > 1 (tp × dp × pp), with a send along the pipeline axis,
//               and train_step refusing pp > 1 until pipeline parallelism lands
//   placement   the node of each rank from the launcher's node-local split, and the TP-spans-nodes
//               warning on made-up placements
//   bad input   --dp values that do not divide np, dp < 1, a batch not divisible by dp, dropout
//               with dp > 1: refused, with the fix in the message
//   training    dp 2 (np 2: tp 1 × dp 2; np 4: tp 2 × dp 2; odd np: tp 1 × dp np) against one
//               device on the same global batch, 3 steps: losses, weights and gradients within a
//               relative 1e-5 (the DP average adds in a different order, so not bitwise); the
//               DP all-reduce in the ledger: one per step, Σ shard sizes + 1 elements
//
// Collectives are few (np 4 runs on 2 cores here): about a dozen per training step.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "expect_bad_input.h"
#include "model/adamw.h"
#include "model/data.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model/train.h"
#include "node.h"
#include "parallel/process_grid.h"
#include "test_util.h"

using namespace tp;
using tp::testing::device;
using tp::testing::expect_bad_input;
using tp::testing::world;

namespace {

std::vector<float> one_hot(int n, int i) {
  std::vector<float> v(static_cast<size_t>(n), 0.0f);
  v[static_cast<size_t>(i)] = 1.0f;
  return v;
}

std::vector<float> indicator(int n, const std::vector<int>& members) {
  std::vector<float> v(static_cast<size_t>(n), 0.0f);
  for (int m : members) v[static_cast<size_t>(m)] = 1.0f;
  return v;
}

}  // namespace

TEST(Grid, MembershipForEveryDpThatDividesNp) {
  const int np = world().size(), r = world().rank();
  for (int dp = 1; dp <= np; ++dp) {
    if (np % dp != 0) continue;
    SCOPED_TRACE("dp = " + std::to_string(dp));
    ProcessGrid grid(world(), dp);
    const int tp = np / dp;
    EXPECT_EQ(grid.tp_size(), tp);
    EXPECT_EQ(grid.dp_size(), dp);
    EXPECT_EQ(grid.tp_rank(), r % tp);
    EXPECT_EQ(grid.dp_rank(), r / tp);
    EXPECT_EQ(grid.tp().size(), tp);
    EXPECT_EQ(grid.dp().size(), dp);
    EXPECT_EQ(grid.world_rank(grid.tp_rank(), grid.dp_rank()), r);
    // TP groups adjacent, DP groups strided by tp.
    std::vector<int> tp_want, dp_want;
    for (int i = 0; i < tp; ++i) tp_want.push_back((r / tp) * tp + i);
    for (int d = 0; d < dp; ++d) dp_want.push_back(r % tp + d * tp);
    EXPECT_EQ(grid.tp_group(grid.dp_rank()), tp_want);
    EXPECT_EQ(grid.dp_group(grid.tp_rank()), dp_want);
    // What the communicators contain: the sum of one-hot rank vectors over each group.
    Tensor in_tp = Tensor::from_host(device(), Shape{np}, one_hot(np, r));
    Tensor in_dp = Tensor::from_host(device(), Shape{np}, one_hot(np, r));
    grid.tp().all_reduce(in_tp);
    grid.dp().all_reduce(in_dp);
    EXPECT_EQ(in_tp.to_host(), indicator(np, tp_want));
    EXPECT_EQ(in_dp.to_host(), indicator(np, dp_want));
  }
}

// Every tp × dp × pp with pp > 1 that np allows (np 2: 1×1×2; np 4: 2×1×2, 1×2×2, 1×1×4): the
// coordinates, each axis's members (formula and communicator), and a send along the pipeline,
// stage s to stage s + 1 in the PP group, as pipeline parallelism will pass activations.
TEST(Grid, PipelineAxisForEveryPpThatDividesNp) {
  const int np = world().size(), r = world().rank();
  if (np == 1) GTEST_SKIP() << "pp > 1 needs two ranks";
  for (int pp = 2; pp <= np; ++pp)
    for (int dp = 1; dp * pp <= np; ++dp) {
      if (np % (dp * pp) != 0) continue;
      const int tp = np / (dp * pp);
      SCOPED_TRACE("tp " + std::to_string(tp) + " dp " + std::to_string(dp) + " pp " +
                   std::to_string(pp));
      ProcessGrid grid(world(), GridAxes{dp, pp});
      EXPECT_EQ(grid.tp_size(), tp);
      EXPECT_EQ(grid.dp_size(), dp);
      EXPECT_EQ(grid.pp_size(), pp);
      EXPECT_EQ(grid.tp_rank(), r % tp);         // tp innermost: adjacent ranks
      EXPECT_EQ(grid.dp_rank(), r / tp % dp);    // then dp
      EXPECT_EQ(grid.pp_rank(), r / (tp * dp));  // pp outermost
      EXPECT_EQ(grid.world_rank(grid.tp_rank(), grid.dp_rank(), grid.pp_rank()), r);
      std::vector<int> tp_want, dp_want, pp_want;
      for (int i = 0; i < tp; ++i) tp_want.push_back(r - r % tp + i);
      for (int d = 0; d < dp; ++d) dp_want.push_back(grid.world_rank(r % tp, d, grid.pp_rank()));
      for (int p = 0; p < pp; ++p) pp_want.push_back(r % (tp * dp) + p * tp * dp);
      EXPECT_EQ(grid.tp_group(grid.dp_rank(), grid.pp_rank()), tp_want);
      EXPECT_EQ(grid.dp_group(grid.tp_rank(), grid.pp_rank()), dp_want);
      EXPECT_EQ(grid.pp_group(grid.tp_rank(), grid.dp_rank()), pp_want);
      for (auto [comm, want] : {std::pair<Communicator*, std::vector<int>*>{&grid.tp(), &tp_want},
                                {&grid.dp(), &dp_want},
                                {&grid.pp(), &pp_want}}) {
        ASSERT_EQ(comm->size(), static_cast<int>(want->size()));
        Tensor in = Tensor::from_host(device(), Shape{np}, one_hot(np, r));
        comm->all_reduce(in);
        EXPECT_EQ(in.to_host(), indicator(np, *want));
      }
      // Stage s receives stage s − 1's world rank, then sends its own on to stage s + 1.
      Communicator& stages = grid.pp();
      const int s = stages.rank();
      Tensor act = Tensor::from_host(device(), Shape{2, 2}, std::vector<float>(4, 1.0f * r));
      if (s > 0) {
        stages.recv(act, s - 1);
        EXPECT_EQ(act.to_host(), std::vector<float>(4, 1.0f * pp_want[static_cast<size_t>(s - 1)]));
        act.copy_from_host(std::vector<float>(4, 1.0f * r));
      }
      if (s + 1 < pp) stages.send(act, s + 1);
      EXPECT_NE(grid.describe().find("PP groups"), std::string::npos) << grid.describe();
    }
}

TEST(Grid, TrainStepRefusesMoreStagesThanBlocks) {
  if (world().size() == 1) GTEST_SKIP() << "pp > 1 needs two ranks";
  ProcessGrid grid(world(), GridAxes{1, world().size()});
  const GptConfig g = mini_gpt();  // L = 1 < pp
  Gpt model(device(), grid.tp(), g);
  model.init(5);
  AdamWParams hp;
  AdamW opt(device(), model.params(), hp);
  MarkovSource data(g.vocab, 5);
  expect_bad_input(
      [&] { train_step(grid, device(), model, opt, data.batch(0, 2, g.seq), 5, 0, hp.lr, 1.0f); },
      "every stage needs at least one block", "train_step with more pipeline stages than blocks");
}

TEST(Grid, NodeOfEachRankAgreesWithTheNodeLocalSplit) {
  const std::vector<int> nodes = node_of_each_rank(MPI_COMM_WORLD);
  int local_rank = 0, local_size = 0;
  node_local_rank(MPI_COMM_WORLD, &local_rank, &local_size);
  ASSERT_EQ(static_cast<int>(nodes.size()), world().size());
  EXPECT_EQ(nodes[0], 0);  // numbered in the order of their lowest rank
  const int mine = nodes[static_cast<size_t>(world().rank())];
  EXPECT_EQ(std::count(nodes.begin(), nodes.end(), mine), local_size);
  for (int n : nodes) EXPECT_TRUE(n >= 0 && n < world().size());
  // This machine's placement passes the check when every TP group fits on one node.
  if (local_size == world().size()) {
    EXPECT_EQ(ProcessGrid::placement_warning(world().size(), nodes), "");
  }
}

TEST(Grid, WarnsWhenATpGroupSpansNodes) {
  EXPECT_EQ(ProcessGrid::placement_warning(2, {0, 0, 1, 1}), "");
  EXPECT_EQ(ProcessGrid::placement_warning(1, {0, 1, 2, 3}), "");
  EXPECT_EQ(ProcessGrid::placement_warning(4, {}), "");  // unknown placement: no check
  const std::string w = ProcessGrid::placement_warning(4, {0, 0, 1, 1});
  EXPECT_NE(w.find("TP group {0, 1, 2, 3} spans nodes {0, 1}"), std::string::npos) << w;
  EXPECT_NE(w.find("choose tp ≤ 2"), std::string::npos) << w;
  const std::string rr = ProcessGrid::placement_warning(2, {0, 1, 0, 1});  // round-robin
  EXPECT_NE(rr.find("TP group {0, 1} spans nodes {0, 1}"), std::string::npos) << rr;
  EXPECT_NE(ProcessGrid::placement_warning(2, {0, 0, 0, 1, 1, 1}), "");  // {2, 3} spans 0 and 1
}

TEST(Grid, RefusesDpThatDoesNotDivideNp) {
  EXPECT_TRUE(ProcessGrid::problems(4, 1).empty());
  EXPECT_TRUE(ProcessGrid::problems(4, 2).empty());
  EXPECT_TRUE(ProcessGrid::problems(4, 4).empty());
  const auto three = ProcessGrid::problems(4, 3);
  ASSERT_EQ(three.size(), 1u);
  EXPECT_NE(three[0].find("--dp=3 does not divide the 4 ranks"), std::string::npos) << three[0];
  EXPECT_NE(three[0].find("choose --dp in {1, 2, 4}"), std::string::npos) << three[0];
  for (int bad : {0, -2, 8}) EXPECT_EQ(ProcessGrid::problems(4, bad).size(), 1u) << bad;
  // The constructor throws it as bad input (every rank the same, before any communication).
  const int np = world().size();
  expect_bad_input([&] { ProcessGrid grid(world(), np + 1); }, "np must equal tp × dp",
                   "dp = np + 1");
}

namespace {

// dp 2 where np is even (np 2: tp 1 × dp 2; np 4: tp 2 × dp 2), else all ranks DP (tp 1).
int dp_for(int np) { return np % 2 == 0 ? 2 : np; }

}  // namespace

TEST(GridTraining, DpTrainsLikeOneDeviceOnTheSameGlobalBatch) {
  const int np = world().size(), dp = dp_for(np);
  ProcessGrid grid(world(), dp);
  SerialCommunicator solo;
  ProcessGrid one_grid(solo, 1);
  const GptConfig g = mini_gpt();
  Gpt model(device(), grid.tp(), g), one(device(), solo, g);
  model.init(5);
  one.init(5);
  AdamWParams hp;
  hp.lr = 1e-2f;
  AdamW opt(device(), model.params(), hp), one_opt(device(), one.params(), hp);
  MarkovSource data(g.vocab, 5);
  const int64_t B = 6 * dp;  // every DP rank gets 6 sequences
  const size_t mark = grid.dp().ledger().size();
  for (int64_t s = 0; s < 3; ++s) {
    const Batch b = data.batch(s, B, g.seq);
    // max_grad_norm 0.5: clipping is active, so the global norm must be the whole model's.
    const StepResult a = train_step(grid, device(), model, opt, b, 5, s, hp.lr, 0.5f);
    const StepResult c = train_step(one_grid, device(), one, one_opt, b, 5, s, hp.lr, 0.5f);
    EXPECT_LE(std::fabs(a.loss - c.loss), 1e-5 * std::fabs(c.loss)) << "step " << s;
    EXPECT_LE(std::fabs(a.grad_norm - c.grad_norm), 1e-5 * c.grad_norm) << "step " << s;
  }
  const double tol = 1e-5;  // relative, whole model: fp32 sums in a different order
  EXPECT_LE(rel_error(gathered(grid.tp(), model.params(), ParamField::Grad),
                      gathered(solo, one.params(), ParamField::Grad)),
            tol);
  EXPECT_LE(rel_error(gathered(grid.tp(), model.params(), ParamField::Value),
                      gathered(solo, one.params(), ParamField::Value)),
            tol);
  // One DP all-reduce per step (none at dp 1), of every gradient of the TP shard + the loss.
  const auto& recs = grid.dp().ledger().records();
  if (dp == 1) {
    EXPECT_EQ(recs.size(), mark);
  } else {
    ASSERT_EQ(recs.size() - mark, 3u);
    int64_t shard = 0;
    for (const Param& p : model.params())
      shard += p.split == Split::Replicated ? p.shape.numel() : p.shape.numel() / grid.tp_size();
    for (size_t i = mark; i < recs.size(); ++i) {
      EXPECT_EQ(recs[i].op, "all_reduce");
      EXPECT_EQ(recs[i].label, "data_parallel_grads");
      EXPECT_EQ(recs[i].elements, shard + 1);
      EXPECT_DOUBLE_EQ(recs[i].wire_bytes, 2.0 * (dp - 1) / dp * 4.0 * (shard + 1));
    }
  }
}

TEST(GridTraining, RefusesABatchNotDivisibleByDpAndDropoutWithDp) {
  const int np = world().size(), dp = dp_for(np);
  if (dp == 1) GTEST_SKIP() << "needs dp > 1";
  ProcessGrid grid(world(), dp);
  GptConfig g = mini_gpt();
  Gpt model(device(), grid.tp(), g);
  model.init(5);
  AdamW opt(device(), model.params(), AdamWParams{});
  MarkovSource data(g.vocab, 5);
  expect_bad_input(
      [&] {
    train_step(grid, device(), model, opt, data.batch(0, dp + 1, g.seq), 5, 0, 1e-3f, 1.0f);
      },
      "is not divisible by dp=" + std::to_string(dp),
      "batch " + std::to_string(dp + 1) + " at dp " + std::to_string(dp));
  g.dropout = 0.1f;
  Gpt dropped(device(), grid.tp(), g);
  dropped.init(5);
  AdamW opt2(device(), dropped.params(), AdamWParams{});
  expect_bad_input(
      [&] {
    train_step(grid, device(), dropped, opt2, data.batch(0, 2 * dp, g.seq), 5, 0, 1e-3f, 1.0f);
      },
      "dropout masks are keyed", "dropout with dp " + std::to_string(dp));
}

TEST(GridTraining, BatchSliceTakesWholeSequences) {
  MarkovSource data(16, 3);
  const Batch b = data.batch(0, 4, 3);
  const Batch s = batch_slice(b, 1, 2);  // sequences 1 and 2
  ASSERT_EQ(s.batch, 2);
  ASSERT_EQ(s.seq, 3);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t j = 0; j < 2; ++j) {
      EXPECT_EQ(s.ids[t * 2 + j], b.ids[t * 4 + 1 + j]);
      EXPECT_EQ(s.targets[t * 2 + j], b.targets[t * 4 + 1 + j]);
    }
}
