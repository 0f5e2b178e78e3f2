// timeline.h — what each rank did when: compute and communication spans, recorded by construction,
// written as a Chrome / Perfetto trace and as an SVG Gantt chart.
//
// A span is [start, end) in seconds on a steady clock, relative to the timeline's origin. Four
// kinds, on three tracks:
//
//   kind        track          recorded by                          name
//   Kernel      compute        every public Device kernel           "gemm", "attention_forward", …
//   Collective  communication  every Communicator collective        "all_reduce", "all_gather", …
//   Wait        compute        an *_async call: its issue, and      "issue all_reduce",
//                              the thread inside Work::wait()       "wait all_reduce"
//   Phase       pipeline       a program's own step around kernels  "F3", "B3": micro-batch 3's
//                              (pipeline parallelism: each op of    forward and backward
//                              a schedule, parallel/pipeline_parallel.h)
//
// Phase spans enclose kernels and collectives and count in no total below.
//
// A blocking collective's span is the call. An asynchronous one's span runs from its issue to the
// moment its completion was seen (Work::wait() returned, or Work::test() first returned true), so
// it may overlap the kernels that ran meanwhile. What the computing thread lost to communication:
//
//   exposed = Σ blocking collectives + Σ Wait spans        (the thread stood still)
//   hidden  = max(0, Σ collectives − exposed)              (communication under compute)
//
// Recording is off unless a timeline is set (Device::set_timeline, Communicator::set_timeline);
// off, each kernel and collective costs a null-pointer test (ScopedSpan, CallTimer). The fronts in
// core/ see a timeline only as a SpanSink (core/span_sink.h: Span, SpanKind, the clock and record()),
// so core/ does not include this layer. On the CPU a
// kernel is synchronous, so its span is the kernel; on a GPU it is the launch (the host enqueues
// and returns), and a collective's span is its enqueue too (NCCL never blocks the host). Host spans
// show where a GPU run's host thread spends its time, not when the GPU computes.
//
// One timeline per rank; record() may be called from several threads (a progress thread, say).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/span_sink.h"

namespace tp {

class Communicator;
class Device;

/// Sums over a set of spans (see the formulas at the top of this file), in seconds.
struct CommTotals {
  double compute = 0;        ///< Σ Kernel spans
  double communication = 0;  ///< Σ Collective spans (issue → completion for async ones)
  double exposed = 0;        ///< Σ blocking Collective spans + Σ Wait spans
  double hidden = 0;         ///< max(0, communication − exposed)
};

/// The spans of one rank (or, on rank 0 after gather(), of every rank): the SpanSink
/// (core/span_sink.h) that Device::set_timeline and Communicator::set_timeline take.
class Timeline : public SpanSink {
 public:
  /// Starts the clock: the origin of every span is now. `rank` tags the spans recorded here.
  explicit Timeline(int rank = 0);
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// Seconds since the origin (steady clock).
  double now() const override;
  /// Appends a span (its rank is set to this timeline's). Thread-safe.
  void record(Span span) override;
  /// Appends a span [start, now()) of `kind` (SpanSink's). Thread-safe.
  using SpanSink::record;

  /// A copy of the spans, in the order they were recorded (a span is recorded when it ends).
  std::vector<Span> spans() const;
  /// The number of spans so far: a mark for totals_since().
  size_t mark() const;
  /// Totals over the spans recorded since `mark` (all of them for 0).
  CommTotals totals_since(size_t mark) const;
  /// Forgets every span (the origin stays).
  void clear();

  /// Collective over `comm`: every rank's spans, on rank 0. The ranks' clocks are aligned at a
  /// barrier (its exit is the same instant everywhere, up to the barrier's skew: microseconds), and
  /// the earliest span of any rank then starts at 0. Rank 0's timeline then holds every rank's
  /// spans (Span::rank = the rank in `comm`); other ranks keep theirs. The spans travel as bytes in
  /// f32 tensors of `device` (two all-gathers: the lengths, then the padded bytes). Detach the
  /// timeline from `comm` and `device` first, or the gather's own work is recorded too.
  void gather(Communicator& comm, Device& device);

  /// The Chrome trace event format (JSON): one process per rank ("rank r"), one thread per track
  /// ("compute", "communication"; overlapping spans of one track get further threads
  /// "communication 2", …), an "X" event per span with ts and dur in µs. Opens in
  /// https://ui.perfetto.dev and chrome://tracing.
  std::string trace_json() const;
  /// Writes trace_json() to `path`; a failure names `what` (svg_plot.h's write_text_file).
  void write_trace_json(const std::string& path, const std::string& what = "") const;
  /// A Gantt chart: one row per (rank, track), spans as rectangles coloured by category (GEMM,
  /// attention, norm / elementwise / other kernels, collective, wait), a time axis in ms, a legend.
  std::string svg() const;
  void write_svg(const std::string& path, const std::string& what = "") const;
  /// A caption after the chart's title (e.g. the communicator's name, which says "simulated"
  /// when a --link shapes the timings).
  void set_title(std::string title) { title_ = std::move(title); }

 private:
  std::chrono::steady_clock::time_point origin_;
  int rank_;
  std::string title_;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
};

}  // namespace tp
