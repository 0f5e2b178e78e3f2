// fail_one_rank.cpp — a helper program for scripts/run-tests.sh: checks that a failure on one
// rank ends the whole job instead of leaving the other ranks blocked in a collective.
//
//   --mode=one-rank   rank 1 throws (TP_CHECK) while the others wait in an all-reduce: the job must
//                     abort with a non-zero exit, well before the test's timeout.
//   --mode=bad-input  every rank builds a ColumnParallelLinear with out = 7, which t = 2, 3, 4 do not
//                     divide: rank 0 prints the one-line divisibility error, every rank exits 2.
#include "core/error.h"
#include "launcher.h"
#include "parallel/linear.h"

using namespace tp;

int main(int argc, char** argv) {
  Options opts("fail_one_rank", "Fails on purpose, to test that no rank is left hanging.");
  opts.text("mode", "one-rank", "which failure", {"one-rank", "bad-input"});
  return run_program(argc, argv, opts, [](Context& ctx) {
    if (ctx.options.get_text("mode") == "bad-input") {
      ColumnParallelLinear fc1(ctx.device, ctx.world, "fc1", 4, 7, true, false);
      return 0;  // reached only when t divides 7
    }
    TP_CHECK(ctx.world.rank() != 1, "rank 1 fails on purpose");
    Tensor x = Tensor::zeros(ctx.device, Shape{4});
    ctx.world.all_reduce(x);  // the other ranks wait here for rank 1, which never comes
    return 0;
  });
}
