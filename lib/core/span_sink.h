// span_sink.h — what the Device and the Communicator fronts record their time into: a span per
// kernel and per collective, handed to a SpanSink when one is set.
//
// The fronts (core/device.cpp, core/communicator.cpp) only produce spans; what becomes of them (kept
// per rank, gathered to rank 0, written as a Perfetto trace or an SVG Gantt chart) is the business
// of observe/timeline.h, whose Timeline is the sink the project uses. core/ names only this small
// interface, so the observing layer sits above core/ and core/ includes nothing of it.
//
// A span is [start, end) in seconds on the sink's clock (now()). The kinds, and the track each is
// drawn on, are described in observe/timeline.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tp {

/// What a span is (and so the row it is drawn on: Kernel and Wait on "compute", Collective on
/// "communication", Phase on "pipeline").
enum class SpanKind { Kernel, Collective, Wait, Phase };

/// One interval of one rank's time.
struct Span {
  SpanKind kind = SpanKind::Kernel;
  std::string name;    ///< kernel ("gemm"), collective op ("all_reduce"), "wait all_reduce", …
  double start = 0;    ///< seconds since the sink's origin
  double end = 0;      ///< seconds since the sink's origin; end ≥ start
  int64_t bytes = 0;   ///< collectives: bytes of the logical buffer (CommRecord::bytes)
  bool async = false;  ///< collectives: issued by an *_async call (its span runs to completion)
  std::string label;   ///< collectives: the CommLedger label ("f backward", …); may be empty
  int rank = 0;        ///< the rank that recorded it (set by the sink)
  double seconds() const { return end - start; }
  /// The row: "compute", "communication" or "pipeline".
  const char* track() const {
    return kind == SpanKind::Collective ? "communication"
           : kind == SpanKind::Phase    ? "pipeline"
                                        : "compute";
  }
};

/// Where spans go: a clock and a record call (observe/timeline.h's Timeline implements it).
class SpanSink {
 public:
  virtual ~SpanSink() = default;
  /// Seconds since the sink's origin (a steady clock).
  virtual double now() const = 0;
  /// Takes one finished span. May be called from several threads.
  virtual void record(Span span) = 0;
  /// Records a span [start, now()) of `kind` named `name`.
  void record(SpanKind kind, const char* name, double start) {
    Span s;
    s.kind = kind;
    s.name = name;
    s.start = start;
    s.end = now();
    record(std::move(s));
  }
};

/// Records one span [construction, destruction) when `sink` is not null: what the public Device
/// kernels use (ScopedSpan span(timeline_, SpanKind::Kernel, "gemm");). Without a sink it costs a
/// null-pointer test.
class ScopedSpan {
 public:
  ScopedSpan(SpanSink* sink, SpanKind kind, const char* name)
      : sink_(sink), name_(name), kind_(kind) {
    if (sink_ != nullptr) start_ = sink_->now();
  }
  ~ScopedSpan() {
    if (sink_ != nullptr) sink_->record(kind_, name_, start_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  SpanSink* sink_;
  const char* name_;
  SpanKind kind_;
  double start_ = 0;
};

}  // namespace tp
