// threads.cpp — tp_bench's threads suite (the driver: main.cpp).
//
// Threads (--suite threads): each rank in turn runs GEMMs while the others sleep, and reports
// its CPU time over wall time — the cores its OpenMP + BLAS threads really use, which the thread
// rule keeps at cores ÷ ranks on the node (fp32 and bf16 GEMMs alternately, so oneDNN's
// threads are held to it too).
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "bench.h"
#include "core/log.h"
#include "cpu_direct.h"
#include "mpi_communicator.h"
#include "observe/timer.h"

namespace tp::bench {
namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Each rank in turn runs GEMMs for ~0.3 s while the others sleep (a nonblocking barrier polled
// with sleeps, so they take no core), and measures its process's CPU time over wall time: the
// number of cores its GEMMs really kept busy. With the thread rule, that is at most the rank's
// thread budget (cores ÷ ranks on the node), however many cores are idle.
void bench_threads(Context& ctx) {
  Device& dev = ctx.device;
  auto* mpi = dynamic_cast<MpiCommunicator*>(&ctx.world);
  if (mpi == nullptr) return;  // the turn-taking needs MPI's nonblocking barrier
  // The node's cores (not this rank's affinity mask, which a binding launcher may have narrowed).
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)),
            threads = cpu::openmp_threads();
  Tensor a(dev, Shape{512, 512}), b(dev, Shape{512, 512}), c(dev, Shape{512, 512});
  dev.fill(a, 0.5f);
  dev.fill(b, 0.25f);
  // And the bf16 GEMM (oneDNN where it is on: its OpenMP threads must keep the same budget).
  Tensor a16(dev, a.shape(), Dtype::bf16), b16(dev, b.shape(), Dtype::bf16);
  dev.convert(a, a16);
  dev.convert(b, b16);
  auto wait_sleeping = [&] {
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Ibarrier(mpi->handle(), &req);
    for (int done = 0; !done; std::this_thread::sleep_for(std::chrono::milliseconds(1)))
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
  };
  double busy = 0;
  for (int turn = 0; turn < ctx.world.size(); ++turn) {
    if (turn == ctx.world.rank()) {
      const double w0 = now(), c0 = cpu_seconds();
      while (now() - w0 < 0.3) {
        dev.gemm(false, false, 1.0f, a, b, 0.0f, c);
        dev.gemm(false, false, 1.0f, a16, b16, 0.0f, c);
      }
      busy = (cpu_seconds() - c0) / (now() - w0);
    }
    wait_sleeping();
  }
  Tensor all(dev, Shape{ctx.world.size() * 4}),
      mine = Tensor::from_host(dev, Shape{4},
                               {static_cast<float>(ctx.local_size), static_cast<float>(threads),
                                static_cast<float>(busy), static_cast<float>(cores)});
  ctx.world.all_gather(mine, all);
  const auto h = all.to_host();
  log0(ctx.world, "# threads: ", ctx.local_size, " rank(s) on this node of ", cores,
       " cores; each rank's GEMMs alone (the others asleep): CPU time / wall time");
  for (int r = 0; r < ctx.world.size(); ++r) {
    log0(ctx.world, "#   rank ", r, ": ", h[r * 4 + 1], " OpenMP/BLAS thread(s), busy cores ",
         h[r * 4 + 2]);
    result(ctx, "threads", "rank" + std::to_string(r) + ".busy_cores", h[r * 4 + 2], "cores",
           h[r * 4 + 1], h[r * 4 + 2] / h[r * 4 + 1]);
  }
  result(ctx, "threads", "node", ctx.local_size * threads, "threads", cores,
         static_cast<double>(ctx.local_size * threads) / cores);
}

// Which --suite values run it (bench.h, Suite).
bool selected(const std::string& suite, bool gpu) {
  return !gpu && (suite == "cpu" || suite == "threads");
}

const bool registered = register_suite({3, selected, bench_threads});

}  // namespace
}  // namespace tp::bench
