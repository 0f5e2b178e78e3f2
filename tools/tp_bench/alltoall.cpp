// alltoall.cpp — tp_bench's all-to-all suite (--suite alltoall; the driver: main.cpp).
//
// Communicator::all_to_all_v, expert parallelism's dispatch, against a bare MPI_Alltoallv of the
// same bytes on the same buffers: each rank's send buffer of 1 … 16 MiB split evenly over the
// ranks (rows of 4 KiB), alternating samples, medians (bench.h, paired_median). The library call
// adds its checks, the ledger record, the timer and the nonblocking call with its backing-off wait
// (mpi/mpi_wait.h); issue 43's goal is lib/mpi ≤ 1.1 at ep 2 (mpirun -np 2). algbw = the bytes
// each rank sends to others per second. #wrong counts elements off their definition (values name
// the source rank, the destination and the element: small integers, exact).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench.h"
#include "core/log.h"
#include "mpi_communicator.h"

namespace tp::bench {
namespace {

void bench_alltoall(Context& ctx) {
  Communicator& w = ctx.world;
  Device& dev = ctx.device;
  auto* mpi = dev.host_accessible() ? dynamic_cast<MpiCommunicator*>(&w) : nullptr;
  const int t = w.size(), r = w.rank();
  log0(ctx.world, "\n# all_to_all_v on ", t, " ranks (", w.name(),
       "): the library call vs a bare MPI_Alltoallv of the same bytes, median of interleaved "
       "samples; each rank's buffer split evenly, rows of 4 KiB");
  log0(ctx.world, "#    bytes/rank    lib_us    mpi_us   algbw_GB/s   lib/mpi   #wrong");
  constexpr int64_t kCols = 1024;  // f32: 4 KiB rows
  for (int64_t bytes = 1 << 20; bytes <= (int64_t{16} << 20); bytes *= 2) {
    const int64_t per_peer = bytes / 4 / kCols / t, rows = per_peer * t;
    const std::vector<int64_t> counts(static_cast<size_t>(t), per_peer);
    // send[row, j] = the id of (source, destination, element): exact below 2^24.
    std::vector<float> values(static_cast<size_t>(rows * kCols));
    for (int64_t i = 0; i < rows * kCols; ++i)
      values[i] = static_cast<float>((r * t + i / (per_peer * kCols)) * 1000 +
                                     i % (per_peer * kCols) % 1000);
    const Tensor send = Tensor::from_host(dev, Shape{rows, kCols}, values);
    Tensor recv = Tensor::zeros(dev, Shape{rows, kCols});
    std::vector<int> elements(t, static_cast<int>(per_peer * kCols)), displs(t);
    for (int p = 0; p < t; ++p) displs[p] = static_cast<int>(p * per_peer * kCols);
    auto lib = [&] { w.all_to_all_v(send, counts, recv, counts); };
    auto raw = [&] {
      MPI_Alltoallv(send.raw(), elements.data(), displs.data(), MPI_FLOAT, recv.raw(),
                    elements.data(), displs.data(), MPI_FLOAT, mpi->handle());
    };
    const int inner = static_cast<int>(std::clamp<int64_t>((int64_t{8} << 20) / bytes, 1, 200));
    const auto [lib_s, raw_s] = mpi != nullptr ? paired_median(lib, raw, 25, inner)
                                               : std::make_pair(best_time(5, lib), 0.0);
    dev.fill(recv, -1.0f);
    lib();
    const std::vector<float> got = recv.to_host();
    int wrong = 0;
    for (int64_t i = 0; i < rows * kCols; ++i) {
      const int64_t source = i / (per_peer * kCols), within = i % (per_peer * kCols);
      wrong += got[i] != static_cast<float>((source * t + r) * 1000 + within % 1000);
    }
    const double sent = static_cast<double>(rows - per_peer) * kCols * 4;  // to other ranks
    char line[160];
    std::snprintf(line, sizeof line, "%14lld %9.1f %9.1f %12.3f %9.3f %8d",
                  static_cast<long long>(rows * kCols * 4), lib_s * 1e6, raw_s * 1e6,
                  sent / lib_s / 1e9, raw_s > 0 ? lib_s / raw_s : 0.0, wrong);
    log0(ctx.world, line);
    const std::string name = "all_to_all_v." + std::to_string(rows * kCols * 4);
    result(ctx, "alltoall", name, lib_s * 1e6, "us", raw_s * 1e6, raw_s > 0 ? lib_s / raw_s : 0.0);
    result(ctx, "alltoall", name + ".wrong", wrong, "count", 0, 0);
  }
}

bool selected(const std::string& suite, bool /*gpu*/) { return suite == "alltoall"; }

const bool registered = register_suite({8, selected, bench_alltoall});

}  // namespace
}  // namespace tp::bench
