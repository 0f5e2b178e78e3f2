// fail_one_rank.cpp — a helper program for scripts/run-tests.sh: checks that a failure on one
// rank ends the whole job instead of leaving the other ranks blocked in a collective.
//
//   --mode=one-rank   rank 1 throws (TP_CHECK) while the others wait in an all-reduce: the job must
//                     abort with a non-zero exit, well before the test's timeout.
//   --mode=bad-input  every rank builds a ColumnParallelLinear with out = 7, which t = 2, 3, 4 do not
//                     divide: rank 0 prints the one-line divisibility error, every rank exits 2.
//   --mode=segfault   every rank runs "steps" of all-reduces; at step 3 the last rank dereferences
//                     a null pointer: it must say "rank R (pid P): fatal signal SIGSEGV at step 3"
//                     and every rank must be gone in seconds.
//   --mode=sigkill    the same, but the last rank SIGKILLs itself (it cannot say anything): the
//                     node's watchdog must name it (launcher/watchdog.h).
//   --async           the steps use all_reduce_async + wait instead of the blocking all-reduce.
#include <signal.h>
#include <unistd.h>

#include "core/error.h"
#include "launcher.h"
#include "parallel/linear.h"

using namespace tp;

int main(int argc, char** argv) {
  Options opts("fail_one_rank", "Fails on purpose, to test that no rank is left hanging.");
  opts.text("mode", "one-rank", "which failure", {"one-rank", "bad-input", "segfault", "sigkill"});
  opts.flag("async", "the steps use asynchronous all-reduces");
  return run_program(argc, argv, opts, [](Context& ctx) {
    const std::string mode = ctx.options.get_text("mode");
    if (mode == "bad-input") {
      ColumnParallelLinear fc1(ctx.device, ctx.world, "fc1", 4, 7, true, false);
      return 0;  // reached only when t divides 7
    }
    if (mode == "segfault" || mode == "sigkill") {
      const int victim = ctx.world.size() - 1;
      Tensor x = Tensor::zeros(ctx.device, Shape{1024});
      for (int64_t step = 1;; ++step) {
        set_current_step(step);
        if (step == 3 && ctx.world.rank() == victim) {
          if (mode == "sigkill") ::kill(::getpid(), SIGKILL);
          // SIGSEGV, as a stray pointer would raise it. (Not a store through a null pointer:
          // under SANITIZE=undefined UBSan would report that store before any signal.)
          ::raise(SIGSEGV);
        }
        if (ctx.options.get_flag("async"))
          ctx.world.all_reduce_async(x)->wait();
        else
          ctx.world.all_reduce(x);
        ::usleep(20000);
      }
    }
    TP_CHECK(ctx.world.rank() != 1, "rank 1 fails on purpose");
    Tensor x = Tensor::zeros(ctx.device, Shape{4});
    ctx.world.all_reduce(x);  // the other ranks wait here for rank 1, which never comes
    return 0;
  });
}
