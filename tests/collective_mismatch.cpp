// collective_mismatch.cpp — a helper program for scripts/tests/collcheck.sh: the last rank gets
// one collective wrong at step 3, and --check-collectives (or TP_CHECK_COLLECTIVES=1) must name it
// (core/checked_communicator.h) instead of letting the job hang.
//
// Each step is two labelled collectives on the world: all_reduce(x) as 'mlp fc2' (the g
// all-reduce of a row-parallel layer), then all_gather of x's shard as 'attn qkv'.
//
//   --mode=none    nothing wrong: --steps steps, the sums checked, prints PASSED (exit 0)
//   --mode=skip    the last rank skips the all-reduce: its all-gather meets the others' all-reduce
//   --mode=size    the last rank all-reduces 8 more elements than the others
//   --mode=op      the last rank broadcasts x from rank 0 instead of all-reducing it
//   --mode=never   the last rank skips the all-reduce and then computes "forever" (sleeps 600 s
//                  outside any collective): the stall detector (launcher/watchdog.h) must name it
//   --async        the all-reduce is all_reduce_async + wait
//   --subgroup     the collectives run on a split of the world into two groups (even and odd
//                  ranks, np >= 4 gives two ranks in each): a sub-group's mismatch
//
// Run: mpirun -np 2 build/bin/collective_mismatch --mode=skip --check-collectives
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "launcher.h"

using namespace tp;

namespace {

constexpr int64_t kN = 4096;  // elements of x

// One step of the program on `comm`; the world's last rank (`last`) does `fault` at step 3 (mode
// "none": nothing).
void step(Device& dev, Communicator& comm, const std::string& fault, bool async, bool last,
          int64_t s) {
  const bool faulty = s == 3 && last && fault != "none";
  Tensor x = Tensor::from_host(dev, Shape{kN}, std::vector<float>(kN, float(comm.rank() + 1)));
  {
    CommLedger::Scope label(comm.ledger(), "mlp fc2");
    if (faulty && fault == "never") ::sleep(600);
    if (faulty && fault == "size") {
      Tensor bigger = Tensor::zeros(dev, Shape{kN + 8});
      comm.all_reduce(bigger);
    } else if (faulty && fault == "op") {
      comm.broadcast(x, 0);
    } else if (!(faulty && fault == "skip")) {
      if (async)
        comm.all_reduce_async(x)->wait();
      else
        comm.all_reduce(x);
      const float want = float(comm.size() * (comm.size() + 1) / 2);
      TP_CHECK(x.to_host()[kN - 1] == want, "all_reduce gave ", x.to_host()[kN - 1], ", not ",
               want);
    }
  }
  CommLedger::Scope label(comm.ledger(), "attn qkv");
  Tensor shard = Tensor::zeros(dev, Shape{kN / comm.size()});
  Tensor full = Tensor::zeros(dev, Shape{kN / comm.size() * comm.size()});
  comm.all_gather(shard, full);
}

}  // namespace

int main(int argc, char** argv) {
  Options opts("collective_mismatch", "Gets one collective wrong on purpose on the last rank.");
  opts.text("mode", "none", "what the last rank gets wrong at step 3",
            {"none", "skip", "size", "op", "never"});
  opts.flag("async", "the all-reduce is asynchronous");
  opts.flag("subgroup", "run on two sub-groups of the world (even and odd ranks)");
  opts.integer("steps", 5, "steps").positive();
  return run_program(argc, argv, opts, [](Context& ctx) {
    const std::string mode = ctx.options.get_text("mode");
    std::unique_ptr<Communicator> sub;
    if (ctx.options.get_flag("subgroup")) sub = ctx.world.split(ctx.world.rank() % 2, 0);
    Communicator& comm = sub ? *sub : ctx.world;
    const int64_t steps = ctx.options.get_int("steps");
    for (int64_t s = 1; s <= steps; ++s) {
      set_current_step(s);
      step(ctx.device, comm, mode, ctx.options.get_flag("async"),
           ctx.world.rank() == ctx.world.size() - 1, s);
    }
    log0(ctx.world, "PASSED: ", steps, " steps on ", ctx.world.name());
    return 0;
  });
}
