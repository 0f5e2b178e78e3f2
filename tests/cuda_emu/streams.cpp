// streams.cpp — the CUDA emulator's streams and events. Work is queued and runs only when something
// waits for it (a stream or device synchronisation, a synchronous copy, an event a stream waits
// for, a stream or event query), so a missing synchronisation reads stale data here too. The
// legacy NULL stream synchronises implicitly with blocking streams, as in CUDA; events carry no
// time (elapsed time 0). Checks: a stream or event that was never created or is already destroyed.
#include <deque>
#include <set>
#include <utility>
#include <vector>

#include "cuda_runtime.h"
#include "emu_internal.h"

struct CUstream_st {
  std::deque<std::pair<const char*, std::function<void()>>> queue;
  uint64_t enqueued = 0, done = 0;
  bool blocking = false;
};
struct CUevent_st {
  CUstream_st* stream = nullptr;  // of the last record
  uint64_t seq = 0;
  bool timing = true;
};

namespace cuda_emu {
namespace {

CUstream_st g_legacy;  // the NULL stream
std::set<CUstream_st*> g_streams;
std::set<CUevent_st*> g_events;

CUstream_st* resolve(cudaStream_t s, const char* call) {
  if (s == nullptr) return &g_legacy;
  if (g_streams.count(s) == 0)
    fatal("%s: stream %p was never created or is destroyed", call, static_cast<void*>(s));
  return s;
}

void run_until(CUstream_st* s, uint64_t seq) {
  while (s->done < seq) {
    auto [what, fn] = std::move(s->queue.front());
    s->queue.pop_front();
    {
      DeviceMode mode(what);
      fn();
    }
    ++s->done;
  }
}

void run_all(CUstream_st* s) { run_until(s, s->enqueued); }

void push(CUstream_st* s, const char* what, std::function<void()> fn) {
  // Implicit synchronisation of the legacy NULL stream with blocking streams.
  if (s == &g_legacy) {
    std::vector<std::pair<CUstream_st*, uint64_t>> marks;
    for (CUstream_st* b : g_streams)
      if (b->blocking) marks.emplace_back(b, b->enqueued);
    if (!marks.empty())
      s->queue.emplace_back(
          "legacy-stream sync",
          [marks] {
        for (auto [b, n] : marks) run_until(b, n);
          }),
          ++s->enqueued;
  } else if (s->blocking && g_legacy.enqueued > g_legacy.done) {
    const uint64_t n = g_legacy.enqueued;
    s->queue.emplace_back("legacy-stream sync", [n] { run_until(&g_legacy, n); });
    ++s->enqueued;
  }
  s->queue.emplace_back(what, std::move(fn));
  ++s->enqueued;
}

}  // namespace

void run_everything() {
  run_all(&g_legacy);
  for (CUstream_st* s : g_streams) run_all(s);
}

void enqueue_work(cudaStream_t stream, const char* what, std::function<void()> work) {
  push(resolve(stream, what), what, std::move(work));
}

void flush_stream(cudaStream_t stream) { run_all(resolve(stream, "flush")); }

}  // namespace cuda_emu

using namespace cuda_emu;

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  (void)priority;
  auto* s = new CUstream_st;
  s->blocking = (flags & cudaStreamNonBlocking) == 0;
  g_streams.insert(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  CUstream_st* s = resolve(stream, "cudaStreamDestroy");
  if (s == &g_legacy) return fail(cudaErrorInvalidResourceHandle);
  run_all(s);  // queued work still completes
  g_streams.erase(s);
  for (CUevent_st* e : g_events)
    if (e->stream == s) e->stream = nullptr;  // recorded and complete
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  run_all(resolve(stream, "cudaStreamSynchronize"));
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream, "cudaStreamQuery");
  if (s->done == s->enqueued) return cudaSuccess;
  run_all(s);  // "not yet" this time; done by the next query
  return cudaErrorNotReady;
}

namespace {
CUevent_st* event(cudaEvent_t e, const char* call) {
  if (g_events.count(e) == 0)
    fatal("%s: event %p was never created or is destroyed", call, static_cast<void*>(e));
  return e;
}
}  // namespace

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  auto* ev = new CUevent_st;
  ev->timing = (flags & cudaEventDisableTiming) == 0;
  g_events.insert(ev);
  *e = ev;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  event(e, "cudaEventDestroy");
  g_events.erase(e);
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  CUevent_st* ev = event(e, "cudaEventRecord");
  CUstream_st* s = resolve(stream, "cudaEventRecord");
  push(s, "cudaEventRecord", [] {});
  ev->stream = s;
  ev->seq = s->enqueued;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  CUevent_st* ev = event(e, "cudaStreamWaitEvent");
  CUstream_st* s = resolve(stream, "cudaStreamWaitEvent");
  if (ev->stream == nullptr) return cudaSuccess;  // never recorded (or its stream is gone): no-op
  CUstream_st* other = ev->stream;
  const uint64_t seq = ev->seq;  // the record as of this call
  if (other == s) return cudaSuccess;
  push(s, "cudaStreamWaitEvent", [other, seq] {
    if (g_streams.count(other) != 0 || other == &g_legacy) run_until(other, seq);
  });
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  CUevent_st* ev = event(e, "cudaEventSynchronize");
  if (ev->stream != nullptr) run_until(ev->stream, ev->seq);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  CUevent_st* ev = event(e, "cudaEventQuery");
  if (ev->stream == nullptr || ev->stream->done >= ev->seq) return cudaSuccess;
  run_until(ev->stream, ev->seq);  // "not yet" this time; complete by the next query
  return cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!event(start, "cudaEventElapsedTime")->timing || !event(end, "cudaEventElapsedTime")->timing)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = 0.0f;  // no timing on the emulator
  return cudaSuccess;
}
