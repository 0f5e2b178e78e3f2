// collectives.cpp — tp_bench's collectives suite (the driver: main.cpp).
//
// Collectives, nccl-tests style, 4 KiB … 64 MiB: the library call against the bare MPI call on
// the same buffers (alternating samples, medians), time per call, algbw = bytes / time, and
// busbw = algbw · 2(t − 1)/t for all-reduce, · (t − 1)/t for all-gather and reduce-scatter: the
// ring-model bytes each rank moves per second, comparable across t. #wrong counts elements that
// differ from the closed-form answer (small integers, exact in fp32 whatever the order of the
// sum).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "bench.h"
#include "core/comm_ledger.h"
#include "core/log.h"
#include "mpi_communicator.h"
#include "observe/timer.h"

namespace tp::bench {
namespace {

void bench_collectives(Context& ctx) {
  Communicator& w = ctx.world;
  Device& dev = ctx.device;
  // The bare MPI call needs host memory: on a GPU device (--comm mpi stages) only the library runs.
  auto* mpi = dev.host_accessible() ? dynamic_cast<MpiCommunicator*>(&w) : nullptr;
  const int t = w.size();
  log0(ctx.world, "\n# collectives on ", t, " ranks (", w.name(),
       "): the library call vs the bare MPI call on the same buffers, median of interleaved "
       "samples");
  if (mpi != nullptr) {
    const std::string tuning = mpi_collective_tuning();
    log0(ctx.world, "# MPI algorithms the library chose (mpi/mpi_tuning.h): ",
         tuning.empty() ? "none, the MPI library's defaults" : tuning);
  }
  // What the library adds to every call, apart from moving data: the front end (checks, the
  // ledger record, the timer) of a one-rank communicator, whose collectives move nothing.
  {
    SerialCommunicator solo;
    Tensor one(dev, Shape{1});
    dev.fill(one, 1.0f);
    const int calls = 100000;
    const double t0 = now();
    for (int i = 0; i < calls; ++i) solo.all_reduce(one);
    const double front = (now() - t0) / calls;
    log0(ctx.world,
         "# the library's own cost per call (checks, CommLedger record, timer; measured on a "
         "one-rank communicator, which moves nothing): ",
         front * 1e9, " ns");
    result(ctx, "coll", "front_end", front * 1e9, "ns", 0, 0);
  }
  log0(ctx.world,
       "#             op      bytes    lib_us    mpi_us   algbw_GB/s   busbw_GB/s   lib/mpi   "
       "#wrong");
  for (int64_t bytes = 4 << 10; bytes <= (int64_t{64} << 20); bytes *= 4) {
    const int64_t n = bytes / 4 / t * t;
    for (const std::string op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      Tensor full(dev, Shape{n}), shard(dev, Shape{n / t});
      const int count = static_cast<int>(op == "all_reduce" ? n : n / t);
      std::function<void()> lib, raw;
      if (op == "all_reduce") {
        lib = [&] { w.all_reduce(full); };
        raw = [&] {
          MPI_Allreduce(MPI_IN_PLACE, full.data(), count, MPI_FLOAT, MPI_SUM, mpi->handle());
        };
      } else if (op == "all_gather") {
        lib = [&] { w.all_gather(shard, full); };
        raw = [&] {
          MPI_Allgather(shard.data(), count, MPI_FLOAT, full.data(), count, MPI_FLOAT,
                        mpi->handle());
        };
      } else {
        lib = [&] { w.reduce_scatter(full, shard); };
        raw = [&] {
          MPI_Reduce_scatter_block(full.data(), shard.data(), count, MPI_FLOAT, MPI_SUM,
                                   mpi->handle());
        };
      }
      // Timed on whatever the buffers hold (sums of sums may overflow to inf: no matter for
      // speed); correctness below, once, on closed-form inputs.
      dev.fill(full, 1.0f);
      dev.fill(shard, 1.0f);
      // The same number of calls on every rank: ~8 MiB moved per sample, 1 to 200 calls.
      const int inner = static_cast<int>(std::clamp<int64_t>((int64_t{8} << 20) / bytes, 1, 200));
      const auto [lib_s, raw_s] = mpi != nullptr ? paired_median(lib, raw, 15, inner)
                                                 : std::make_pair(best_time(5, lib), 0.0);
      int wrong = 0;
      if (op == "all_reduce") {
        dev.fill(full, w.rank() + 1.0f);
        lib();
        for (float v : full.to_host()) wrong += v != t * (t + 1) / 2.0f;
      } else if (op == "all_gather") {
        dev.fill(shard, 1.0f * w.rank());
        lib();
        const auto h = full.to_host();
        for (int64_t i = 0; i < n; ++i) wrong += h[i] != static_cast<float>(i / (n / t));
      } else {
        dev.fill(full, w.rank() + 1.0f);
        lib();
        for (float v : shard.to_host()) wrong += v != t * (t + 1) / 2.0f;
      }
      const double buf = 4.0 * n;
      const double factor = ring_wire_bytes(op, t, static_cast<int64_t>(buf)) / buf;
      const double algbw = buf / lib_s / 1e9;
      char line[200];
      std::snprintf(line, sizeof line, "%16s %10.0f %9.1f %9.1f %12.3f %12.3f %9.3f %8d",
                    op.c_str(), buf, lib_s * 1e6, raw_s * 1e6, algbw, algbw * factor,
                    raw_s > 0 ? lib_s / raw_s : 0.0, wrong);
      log0(ctx.world, line);
      const std::string name = op + "." + std::to_string(static_cast<int64_t>(buf));
      result(ctx, "coll", name, lib_s * 1e6, "us", raw_s * 1e6, raw_s > 0 ? lib_s / raw_s : 0.0);
      result(ctx, "coll", name + ".wrong", wrong, "count", 0, 0);
    }
  }
}

// Which --suite values run it (bench.h, Suite), on either backend.
bool selected(const std::string& suite, bool /*gpu*/) {
  return suite == "cpu" || suite == "collectives" || suite == "all";
}

const bool registered = register_suite({6, selected, bench_collectives});

}  // namespace
}  // namespace tp::bench
