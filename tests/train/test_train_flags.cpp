// test_train_flags.cpp — tp_train's bad flags, each refused with its one line (exit 2) by the
// option parser or the run plan (train/run_plan.h), without MPI (serial). These cases ran as
// whole tp_train launches under mpirun before; scripts/run-tests.sh and scripts/tests/ keep one
// end-to-end run per kind (the exit code, one "error:" line from rank 0, no hang, no file
// touched), and the words of every case are checked here in milliseconds.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "train/run_plan.h"
#include "train_test_helpers.h"

namespace {

struct BadFlags {
  const char* name;               // what the case is
  std::vector<const char*> args;  // tp_train's flags (after --steps 1, as the scripts give them)
  int ranks;                      // the world size the plan is made for (mpirun -np)
  const char* says;               // a part of the one error line
};

std::ostream& operator<<(std::ostream& os, const BadFlags& c) { return os << c.name; }

// The error tp_train would print: the parser's or the plan's, exit code 2; "" when both accept.
std::string refusal(const BadFlags& c, int& exit_code) {
  std::vector<const char*> args = {"--steps", "1"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  try {
    const tp::Options o = tp::testing::train_options(args);
    tp::plan_run(o, c.ranks);
  } catch (const tp::Error& e) {
    exit_code = e.exit_code();
    return e.what();
  }
  return "";
}

class TrainFlags : public ::testing::TestWithParam<BadFlags> {};

TEST_P(TrainFlags, RefusedInOneLine) {
  const BadFlags& c = GetParam();
  int exit_code = 0;
  const std::string m = refusal(c, exit_code);
  ASSERT_FALSE(m.empty()) << "tp_train accepted " << c.name;
  EXPECT_EQ(exit_code, 2) << m;
  EXPECT_NE(m.find(c.says), std::string::npos) << "says: " << m << "\nwanted: " << c.says;
  // Flag terms only: no type of the library, no size that wrapped around.
  for (const char* internal : {"GptConfig", "negative dimension", "about -", "padded_vocab"})
    EXPECT_EQ(m.find(internal), std::string::npos) << m;
}

const BadFlags kGrid[] = {
    {"heads not divisible by t",
     {"--hidden", "48", "--heads", "6"},
     4,
     "heads=6 is not divisible by t=4"},
    {"several config problems at once",
     {"--hidden", "50", "--heads", "4", "--ffn", "7", "--kv-heads", "3"},
     2,
     "4 problems: hidden=50 is not divisible by heads=4"},
    {"--sp with seq not divisible by t",
     {"--sp", "--seq", "10"},
     4,
     "seq=10 is not divisible by t=4: sequence parallelism gives each rank seq/t tokens"},
    {"--dp not dividing np",
     {"--dp", "3"},
     4,
     "--dp=3 does not divide the 4 ranks: np must equal tp × dp (tp = np / dp); choose --dp in "
     "{1, 2, 4}"},
    {"--dp 0", {"--dp", "0"}, 2, "--dp=0: must be >= 1"},
    {"--batch not divisible by --dp",
     {"--dp", "2", "--batch", "3"},
     2,
     "--batch=3 is not divisible by --dp=2"},
    {"--dropout with --dp > 1", {"--dp", "2", "--dropout", "0.1"}, 2, "--dropout with --dp > 1"},
    {"heads not divisible by tp with --dp",
     {"--dp", "2", "--hidden", "48", "--heads", "3"},
     4,
     "heads=3 is not divisible by t=2"},
    {"kv_heads not divisible by t",
     {"--heads", "4", "--kv-heads", "2"},
     4,
     "kv_heads=2 is not divisible by t=4"},
    {"tp_train --pp 0", {"--pp", "0"}, 1, "--pp=0: must be in [1, 1024]"},
    {"tp_train --pp -1", {"--pp", "-1"}, 1, "--pp=-1: must be in [1, 1024]"},
    {"--schedule wrong", {"--schedule", "afb"}, 1, "--schedule=afb: expected one of afab, 1f1b"},
    {"tp_train --cp 0", {"--cp", "0"}, 1, "--cp=0: must be in [1, 4096]"},
    {"--cp not dividing np", {"--cp", "2"}, 3, "--cp=2 does not divide the 3 ranks"},
    {"--cp-layout wrong",
     {"--cp", "2", "--cp-layout", "spiral"},
     2,
     "--cp-layout=spiral: expected one of zigzag, contiguous"},
    {"--seq not in 2·cp chunks", {"--cp", "2", "--seq", "6"}, 2, "is not divisible by 4"},
    {"--seq not in cp chunks (contiguous)",
     {"--cp", "4", "--cp-layout", "contiguous", "--seq", "6"},
     4,
     "is not divisible by 4"},
    {"--sp with --cp: S/cp not over t",
     {"--cp", "2", "--cp-layout", "contiguous", "--seq", "6", "--sp"},
     4,
     "--sp with --cp=2: each CP rank's 3 positions must split over t=2"},
    {"--audit-grads with --cp",
     {"--cp", "2", "--audit-grads"},
     2,
     "--audit-grads with --cp=2: not implemented for context parallelism"},
    {"--memory-budget with --cp",
     {"--cp", "2", "--memory-budget", "100"},
     2,
     "--memory-budget with --cp=2: not implemented for context parallelism"},
};
INSTANTIATE_TEST_SUITE_P(Grid, TrainFlags, ::testing::ValuesIn(kGrid));

// An empty value for a path flag (an unset $CKPT) is an error, not "no file" (--save= stays an
// end-to-end check in scripts/tests/flags.sh).
const BadFlags kEmptyPaths[] = {
    {"--load=", {"--load="}, 2, "--load= is empty (an unset variable?); give a path, or leave"},
    {"--data=", {"--data="}, 2, "--data= is empty (an unset variable?)"},
    {"--init-from=", {"--init-from="}, 2, "--init-from= is empty (an unset variable?)"},
    {"--log-json=", {"--log-json="}, 2, "--log-json= is empty (an unset variable?)"},
    {"--trace=", {"--trace="}, 2, "--trace= is empty (an unset variable?)"},
    {"--plot=", {"--plot="}, 2, "--plot= is empty (an unset variable?)"},
    {"--dump-grads=", {"--dump-grads="}, 2, "--dump-grads= is empty (an unset variable?)"},
    {"--export-hf=", {"--export-hf="}, 2, "--export-hf= is empty (an unset variable?)"},
    {"--save with an empty next word", {"--save", ""}, 1, "--save= is empty"},
};
INSTANTIATE_TEST_SUITE_P(EmptyPaths, TrainFlags, ::testing::ValuesIn(kEmptyPaths));

// Numbers checked in the type they are stored in, reals as the float they become, counts within
// the bound their --help states.
const BadFlags kNumbers[] = {
    {"--dp 2^32 + 2",
     {"--dp", "4294967298"},
     2,
     "--dp=4294967298: out of range of the 32-bit int this value is stored in"},
    {"an integer past 64 bits",
     {"--seed", "99999999999999999999"},
     1,
     "--seed=99999999999999999999: out of range of a 64-bit integer"},
    {"--steps 2^63 - 1",
     {"--steps", "9223372036854775807"},
     1,
     "--steps=9223372036854775807: must be in [0, 1000000000]"},
    {"--lr 1e-50 (0 as a float)", {"--lr", "1e-50"}, 1, "--lr=1e-50: is 0 as a 32-bit float"},
    {"--weight-decay 1e39",
     {"--weight-decay", "1e39"},
     1,
     "--weight-decay=1e39: is Inf as a 32-bit float"},
    {"--dropout 0.99999999999",
     {"--dropout", "0.99999999999"},
     1,
     "--dropout=0.99999999999: must be in [0, 1), and it is 1 as the 32-bit float it is stored in"},
    {"--lr 1e-400 underflows", {"--lr", "1e-400"}, 1, "--lr=1e-400: underflows to 0 as a double"},
    {"--clip 1e300", {"--clip", "1e300"}, 1, "--clip=1e300: is Inf as a 32-bit float"},
    {"--decay-steps below --warmup",
     {"--warmup", "10", "--decay-steps", "5"},
     1,
     "--decay-steps=5 must be above --warmup=10"},
    {"--decay-steps equal to --warmup",
     {"--warmup", "10", "--decay-steps", "10"},
     1,
     "--decay-steps=10 must be above --warmup=10"},
    {"--eval-batches 10^8",
     {"--eval-every", "1", "--eval-batches", "100000000"},
     1,
     "--eval-batches=100000000: must be in [1, 10000]"},
    {"--eval-batches 2^32 + 1",
     {"--eval-every", "1", "--eval-batches", "4294967297"},
     1,
     "--eval-batches=4294967297: must be in [1, 10000]"},
    {"--keep 2^32 + 1 (not kept as 1)",
     {"--save", "unused/", "--save-every", "1", "--keep", "4294967297"},
     1,
     "--keep=4294967297: must be in [1, 1000]"},
    {"--warmup 2^40", {"--warmup", "1099511627776"}, 1, "--warmup=1099511627776: must be"},
    {"--decay-steps 2^40",
     {"--decay-steps", "1099511627776"},
     1,
     "--decay-steps=1099511627776: must be"},
    {"--save-every 2^40",
     {"--save-every", "1099511627776"},
     1,
     "--save-every=1099511627776: must be"},
    {"--eval-every 2^40",
     {"--eval-every", "1099511627776"},
     1,
     "--eval-every=1099511627776: must be"},
    {"--log-every 2^40", {"--log-every", "1099511627776"}, 1, "--log-every=1099511627776: must be"},
    {"--memory-budget 1e-300 (not off)",
     {"--memory-budget", "1e-300"},
     1,
     "--memory-budget=1e-300: must be 0 or >= 1"},
    {"--peak-tflops 1e-300",
     {"--peak-tflops", "1e-300"},
     1,
     "--peak-tflops=1e-300: must be 0 or >= 1e-06"},
};
INSTANTIATE_TEST_SUITE_P(Numbers, TrainFlags, ::testing::ValuesIn(kNumbers));

// Sizes no machine holds: one line in flag terms, before anything is allocated or wraps.
const BadFlags kSizes[] = {
    {"--hidden 2^63 - 1",
     {"--hidden", "9223372036854775807"},
     1,
     "--hidden=9223372036854775807 is too large: at most 2147483647"},
    {"--pad-vocab-multiple 2^62",
     {"--pad-vocab-multiple", "4611686018427387904"},
     1,
     "--pad-vocab-multiple=4611686018427387904 is too large"},
    {"--hidden 2^31 - 1 --heads 1",
     {"--hidden", "2147483647", "--heads", "1"},
     1,
     "more than any machine holds; reduce --hidden"},
    {"--batch 2^62",
     {"--batch", "4611686018427387904"},
     1,
     "one step's activations would hold about"},
};
INSTANTIATE_TEST_SUITE_P(Sizes, TrainFlags, ::testing::ValuesIn(kSizes));

}  // namespace
