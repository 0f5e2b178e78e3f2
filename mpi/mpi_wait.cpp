#include "mpi_wait.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/progress.h"
#include "mpi_util.h"

namespace tp::mpi {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::chrono::microseconds kSpin{2000};
constexpr std::chrono::microseconds kMinSleep{50};
constexpr std::chrono::microseconds kMaxSleep{1000};
}  // namespace

void wait_all(int n, MPI_Request* requests, const char* call) {
  int done = 0;
  check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), call);
  if (done) return;
  const Clock::time_point start = Clock::now();
  for (;;) {
    check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), call);
    if (done) return;
    const auto waited = Clock::now() - start;
    if (waited < kSpin) continue;
    if (ProgressMonitor* monitor = progress_monitor()) monitor->waiting();
    const auto nap = std::clamp<Clock::duration>(waited / 16, kMinSleep, kMaxSleep);
    std::this_thread::sleep_for(nap);
  }
}

}  // namespace tp::mpi
