#include "core/progress.h"

#include <atomic>

namespace tp {

namespace {
std::atomic<ProgressMonitor*> g_monitor{nullptr};
}  // namespace

ProgressMonitor* progress_monitor() { return g_monitor.load(std::memory_order_acquire); }

void set_progress_monitor(ProgressMonitor* monitor) {
  g_monitor.store(monitor, std::memory_order_release);
}

}  // namespace tp
