// test_evaluate_mpi.cpp — the validation loss on held-out data (model/evaluate.h): at t = np it is
// t = 1's with dropout off, a DP replica's micro-batches average to the whole, a stop ends the
// evaluation after the batch that asked it (MPI: the model is tensor parallel over every rank).
#include <gtest/gtest.h>

#include <cmath>

#include "core/communicator.h"
#include "model/data.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "model/presets.h"
#include "model_test_helpers.h"
#include "test_util.h"

using tp::testing::device;
using tp::testing::world;

namespace tp {
namespace {

// The validation loss at t = np equals t = 1 (the model tests' loss tolerance), with dropout off:
// a model built with dropout 0.1 evaluates as one built without it, and its training forward
// still drops (the loss differs).
TEST(HeldOut, ValidationLossMatchesSingleDeviceWithoutDropout) {
  GptConfig cfg = tp::tiny_gpt(2);
  cfg.dropout = 0.1f;
  GptConfig plain = cfg;
  plain.dropout = 0.0f;
  const MarkovSource src(cfg.vocab, 4);
  SerialCommunicator solo;
  Gpt tp_model(device(), world(), cfg), one(device(), solo, plain), one_drop(device(), solo, cfg);
  for (Gpt* m : {&tp_model, &one, &one_drop}) m->init(tp::testing::kSeed);
  const double at_t = held_out_loss(tp_model, src, 3, 4, cfg.seq, tp::testing::kSeed);
  const double ref = held_out_loss(one, src, 3, 4, cfg.seq, tp::testing::kSeed);
  EXPECT_NEAR(at_t, ref, tp::testing::kLossTol * std::abs(ref)) << "t = " << world().size();
  EXPECT_EQ(held_out_loss(one_drop, src, 3, 4, cfg.seq, tp::testing::kSeed), ref);
  const Batch b = src.held_out_batch(0, 4, cfg.seq);
  EXPECT_NE(one_drop.forward(b, tp::testing::kSeed, 0), one.forward(b, tp::testing::kSeed, 0));
  // A DP replica's slice in micro-batches: the two halves average to the whole.
  const double halves = (held_out_loss(one, src, 3, 4, cfg.seq, 1, {0, 2, 2}) +
                         held_out_loss(one, src, 3, 4, cfg.seq, 1, {2, 2, 1})) /
                        2;
  EXPECT_NEAR(halves, ref, 1e-6 * std::abs(ref));
}

// issue 39: the stop question is asked after each held-out batch; a yes ends the evaluation at
// once (a SIGTERM need not wait for --eval-batches batches) and the loss is NaN, not a mean of part.
TEST(HeldOut, AStopEndsTheEvaluationAfterTheBatchThatAskedIt) {
  const GptConfig cfg = tp::tiny_gpt(2);
  const MarkovSource src(cfg.vocab, 4);
  Gpt model(device(), world(), cfg);
  model.init(tp::testing::kSeed);
  int asked = 0;
  const double stopped = held_out_loss(model, src, 1000, 4, cfg.seq, tp::testing::kSeed, {},
                                       [&asked] { return ++asked == 2; });
  EXPECT_EQ(asked, 2);
  EXPECT_TRUE(std::isnan(stopped));
  asked = 0;
  const double whole = held_out_loss(model, src, 3, 4, cfg.seq, tp::testing::kSeed, {},
                                     [&asked] { return ++asked > 3; });
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(whole, held_out_loss(model, src, 3, 4, cfg.seq, tp::testing::kSeed));
}

}  // namespace
}  // namespace tp
