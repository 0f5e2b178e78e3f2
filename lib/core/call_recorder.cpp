// call_recorder.cpp — the process's CallRecorder (see call_recorder.h).
#include "core/call_recorder.h"

#include <atomic>

namespace tp {

namespace {
std::atomic<CallRecorder*> g_recorder{nullptr};
}  // namespace

CallRecorder* call_recorder() { return g_recorder.load(std::memory_order_acquire); }

void set_call_recorder(CallRecorder* recorder) {
  g_recorder.store(recorder, std::memory_order_release);
}

void dump_flight_record(const std::string& reason) {
  CallRecorder* recorder = call_recorder();
  if (recorder == nullptr) return;
  try {
    recorder->dump(reason);
  } catch (...) {  // a dump is best effort: the error being reported matters more
  }
}

}  // namespace tp
