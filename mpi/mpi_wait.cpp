#include "mpi_wait.h"

#include <algorithm>
#include <chrono>
#include <functional>
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

void wait_until(const std::function<bool()>& done) {
  if (done()) return;
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (done()) return;
    const auto waited = Clock::now() - start;
    if (waited < kSpin) continue;
    if (ProgressMonitor* monitor = progress_monitor()) monitor->waiting();
    const auto nap = std::clamp<Clock::duration>(waited / 16, kMinSleep, kMaxSleep);
    std::this_thread::sleep_for(nap);
  }
}

void wait_all(int n, MPI_Request* requests, const char* call) {
  wait_until([&] {
    int done = 0;
    check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), call);
    return done != 0;
  });
}

}  // namespace tp::mpi
