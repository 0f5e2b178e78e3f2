#include "core/communicator.h"

#include <chrono>
#include <cstring>
#include <exception>

#include "core/call_recorder.h"
#include "core/device.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/span_sink.h"

namespace tp {

namespace {
// The flight recorder's nesting (core/call_recorder.h): calls of this thread now inside a front,
// and the token of the outermost one (0: not recorded).
thread_local int t_depth = 0;
thread_local uint64_t t_outer = 0;

// One call's life in the flight recorder: a blocking call completes when the scope ends without an
// exception (a call that threw stays incomplete in the dump); an *_async one when its Work does.
class FlightScope {
 public:
  FlightScope(uint64_t token, bool async)
      : token_(token), async_(async), exceptions_(std::uncaught_exceptions()) {
    ++t_depth;
    if (token_ != 0) t_outer = token_;
  }
  ~FlightScope() {
    --t_depth;
    if (token_ == 0) return;
    t_outer = 0;
    CallRecorder* recorder = call_recorder();
    if (recorder != nullptr && !async_ && std::uncaught_exceptions() == exceptions_)
      recorder->completed(token_);
  }
  FlightScope(const FlightScope&) = delete;
  FlightScope& operator=(const FlightScope&) = delete;
  uint64_t token() const { return token_; }

 private:
  uint64_t token_;
  bool async_;
  int exceptions_;
};

// The Work of a recorded *_async call: tells the recorder when the call is seen complete.
class FlightWork : public Work {
 public:
  FlightWork(std::unique_ptr<Work> work, uint64_t token) : work_(std::move(work)), token_(token) {}
  // Destroyed unseen: the backend's Work completes the call as it goes (see TimedWork).
  ~FlightWork() override {
    if (seen_) return;
    work_.reset();
    completed();
  }
  void wait() override {
    work_->wait();
    completed();
  }
  bool test() override {
    const bool done = work_->test();
    if (done) completed();
    return done;
  }

 private:
  void completed() {
    if (seen_) return;
    seen_ = true;
    if (CallRecorder* recorder = call_recorder()) recorder->completed(token_);
  }
  std::unique_ptr<Work> work_;
  uint64_t token_;
  bool seen_ = false;
};

// The Work an *_async call returns while a timeline is set: the backend's Work, and the spans of
// what follows the issue. The collective's span runs from its issue to the moment its completion is
// seen (wait() returns, or test() first says true); the thread's time inside wait() is a Wait span.
class TimedWork : public Work {
 public:
  TimedWork(std::unique_ptr<Work> work, SpanSink& timeline, Span collective)
      : work_(std::move(work)), timeline_(timeline), collective_(std::move(collective)) {}
  // Destroyed before its completion was seen: the backend's Work completes the collective as it
  // goes (each backend's does), and the thread waits for that.
  ~TimedWork() override {
    if (seen_) return;
    const double start = timeline_.now();
    work_.reset();
    try {
      waited(start);
    } catch (...) {  // never throw from a destructor; the span is lost, nothing else
    }
  }
  void wait() override {
    const double start = timeline_.now();
    work_->wait();
    waited(start);
  }
  bool test() override {
    const bool done = work_->test();
    if (done) completed(timeline_.now());
    return done;
  }

 private:
  void waited(double start) {
    const double end = timeline_.now();
    Span wait;
    wait.kind = SpanKind::Wait;
    wait.name = "wait " + collective_.name;
    wait.start = start;
    wait.end = end;
    timeline_.record(std::move(wait));
    completed(end);
  }
  void completed(double when) {
    if (seen_) return;
    seen_ = true;
    collective_.end = when;
    timeline_.record(collective_);
  }

  std::unique_ptr<Work> work_;
  SpanSink& timeline_;
  Span collective_;
  bool seen_ = false;
};

// Times one call: the wall time goes into its ledger record, and with a timeline a span: the call
// itself for a blocking collective, the issue (a Wait span "issue <op>") for an *_async one, whose
// Work track() then wraps. The progress monitor (core/progress.h) sees the call from start to end.
class CallTimer {
 public:
  CallTimer(CommLedger& ledger, size_t index, SpanSink* timeline, uint64_t flight)
      : ledger_(ledger),
        index_(index),
        timeline_(timeline),
        flight_(flight, ledger.records()[index].async),
        progress_(ledger.records()[index].op.c_str(), ledger.records()[index].group_size,
                  ledger.records()[index].label),
        start_(std::chrono::steady_clock::now()),
        span_start_(timeline != nullptr ? timeline->now() : 0.0) {}
  ~CallTimer() {
    ledger_.set_seconds(
        index_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    if (timeline_ == nullptr) return;
    const CommRecord& r = ledger_.records()[index_];
    Span call;
    if (r.async) {
      call.kind = SpanKind::Wait;
      call.name = "issue " + r.op;
    } else {
      call = collective();
    }
    call.start = span_start_;
    call.end = timeline_->now();
    timeline_->record(std::move(call));
  }
  /// The Work of an *_async call, wrapped so that its completion is recorded.
  std::unique_ptr<Work> track(std::unique_ptr<Work> work) const {
    if (flight_.token() != 0) work = std::make_unique<FlightWork>(std::move(work), flight_.token());
    if (timeline_ == nullptr) return work;
    return std::make_unique<TimedWork>(std::move(work), *timeline_, collective());
  }

 private:
  // The collective's span, from the start of the call (its end is set when it is known).
  Span collective() const {
    const CommRecord& r = ledger_.records()[index_];
    Span s;
    s.kind = SpanKind::Collective;
    s.name = r.op;
    s.start = span_start_;
    s.bytes = r.bytes;
    s.async = r.async;
    s.label = r.label;
    return s;
  }

  CommLedger& ledger_;
  size_t index_;
  SpanSink* timeline_;
  FlightScope flight_;
  ProgressScope progress_;
  std::chrono::steady_clock::time_point start_;
  double span_start_;
};
}  // namespace

void Communicator::check_gather_shapes(const char* op, const Tensor& shard,
                                       const Tensor& full) const {
  TP_CHECK(shard.defined() && full.defined(), op, ": undefined tensor");
  TP_CHECK(full.numel() == shard.numel() * size_, op, ": the full buffer ", full.shape().str(),
           " must hold t=", size_, " shards of ", shard.shape().str());
  check_same_dtype(op, shard, full);
}

void Communicator::check_same_dtype(const char* op, const Tensor& a, const Tensor& b) const {
  TP_CHECK(a.dtype() == b.dtype(), op, ": a ", dtype_name(a.dtype()), " and a ",
           dtype_name(b.dtype()), " buffer; both sides of a collective have one dtype");
}

void Communicator::barrier() {
  static const std::string kNoLabel;
  FlightScope flight_scope(flight("barrier", 0, false, kNoLabel, -1, Dtype::f32), false);
  ProgressScope progress("barrier", size_, "");
  do_barrier();
}

uint64_t Communicator::flight(size_t index, int peer, Dtype dtype) {
  if (call_recorder() == nullptr) return 0;
  const CommRecord& r = ledger_.records()[index];
  return flight(r.op.c_str(), r.elements, r.async, r.label, peer, dtype);
}

uint64_t Communicator::flight(const char* op, int64_t count, bool async, const std::string& label,
                              int peer, Dtype dtype) {
  CallRecorder* recorder = call_recorder();
  if (recorder == nullptr) return 0;
  if (t_depth > 0) {  // a decorator's inner call: the outermost one has reached this far
    if (t_outer != 0) recorder->started(t_outer);
    return 0;
  }
  if (flight_group_ < 0) flight_group_ = recorder->add_group(role_, world_ranks_, rank_, size_);
  return recorder->issued(flight_group_, ++flight_sequence_,
                          IssuedCall{op, count, dtype, peer, async, &label});
}

void Communicator::check_peer(const char* op, int peer) const {
  TP_CHECK(peer >= 0 && peer < size_, op, ": peer rank ", peer, " outside the group of ", size_);
}

void Communicator::check_p2p(const char* op, const Tensor& x, int peer) const {
  TP_CHECK(x.defined(), op, ": undefined tensor");
  check_peer(op, peer);
  TP_CHECK(peer != rank_, op, ": peer rank ", peer, " is this rank; name another rank of the group",
           " of ", size_);
}

void Communicator::unsupported(const char* op) const {
  throw Error(name() + " communicator: " + op + " not supported");
}

void Communicator::all_reduce(Tensor& x, ReduceOp op) {
  TP_CHECK(x.defined(), "all_reduce: undefined tensor");
  const size_t index = ledger_.record(op == ReduceOp::Max ? "all_reduce_max" : "all_reduce", size_,
                                      x.numel(), false, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, x.dtype()));
  do_all_reduce(x, op);
}

void Communicator::all_gather(const Tensor& shard, Tensor& full) {
  check_gather_shapes("all_gather", shard, full);
  const size_t index =
      ledger_.record("all_gather", size_, full.numel(), false, full.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, full.dtype()));
  do_all_gather(shard, full);
}

void Communicator::reduce_scatter(const Tensor& full, Tensor& shard) {
  check_gather_shapes("reduce_scatter", shard, full);
  const size_t index =
      ledger_.record("reduce_scatter", size_, full.numel(), false, full.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, full.dtype()));
  do_reduce_scatter(full, shard);
}

void Communicator::broadcast(Tensor& x, int root) {
  check_peer("broadcast", root);
  const size_t index = ledger_.record("broadcast", size_, x.numel(), false, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, root, x.dtype()));
  do_broadcast(x, root);
}

void Communicator::send_recv(const Tensor& send, int to, Tensor& recv, int from) {
  check_peer("send_recv", to);
  check_peer("send_recv", from);
  TP_CHECK(send.defined() && recv.defined(), "send_recv: undefined tensor");
  check_same_dtype("send_recv", send, recv);
  const size_t index = ledger_.record("send_recv", size_, send.numel(), false, send.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, send.dtype()));
  do_send_recv(send, to, recv, from);
}

std::unique_ptr<Work> Communicator::all_reduce_async(Tensor& x) {
  TP_CHECK(x.defined(), "all_reduce_async: undefined tensor");
  const size_t index = ledger_.record("all_reduce", size_, x.numel(), true, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, x.dtype()));
  return timer.track(do_all_reduce_async(x));
}

std::unique_ptr<Work> Communicator::all_gather_async(const Tensor& shard, Tensor& full) {
  check_gather_shapes("all_gather_async", shard, full);
  const size_t index = ledger_.record("all_gather", size_, full.numel(), true, full.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, full.dtype()));
  return timer.track(do_all_gather_async(shard, full));
}

std::unique_ptr<Work> Communicator::reduce_scatter_async(const Tensor& full, Tensor& shard) {
  check_gather_shapes("reduce_scatter_async", shard, full);
  const size_t index =
      ledger_.record("reduce_scatter", size_, full.numel(), true, full.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, full.dtype()));
  return timer.track(do_reduce_scatter_async(full, shard));
}

std::unique_ptr<Work> Communicator::send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                    int from) {
  check_peer("send_recv_async", to);
  check_peer("send_recv_async", from);
  TP_CHECK(send.defined() && recv.defined(), "send_recv_async: undefined tensor");
  check_same_dtype("send_recv_async", send, recv);
  const size_t index = ledger_.record("send_recv", size_, send.numel(), true, send.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, send.dtype()));
  return timer.track(do_send_recv_async(send, to, recv, from));
}

void Communicator::send(const Tensor& x, int to) {
  check_p2p("send", x, to);
  const size_t index = ledger_.record("send", size_, x.numel(), false, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, to, x.dtype()));
  do_send(x, to);
}

void Communicator::recv(Tensor& x, int from) {
  check_p2p("recv", x, from);
  const size_t index = ledger_.record("recv", size_, x.numel(), false, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, from, x.dtype()));
  do_recv(x, from);
}

std::unique_ptr<Work> Communicator::send_async(const Tensor& x, int to) {
  check_p2p("send_async", x, to);
  const size_t index = ledger_.record("send", size_, x.numel(), true, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, to, x.dtype()));
  return timer.track(do_send_async(x, to));
}

std::unique_ptr<Work> Communicator::recv_async(Tensor& x, int from) {
  check_p2p("recv_async", x, from);
  const size_t index = ledger_.record("recv", size_, x.numel(), true, x.element_size());
  CallTimer timer(ledger_, index, timeline_, flight(index, from, x.dtype()));
  return timer.track(do_recv_async(x, from));
}

void Communicator::check_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                                      const Tensor& recv,
                                      const std::vector<int64_t>& recv_rows) const {
  const char* op = "all_to_all_v";
  TP_CHECK(send.defined() && recv.defined(), op, ": undefined tensor");
  TP_CHECK(send.ndim() == 2 && recv.ndim() == 2, op, ": send ", send.shape().str(), " and recv ",
           recv.shape().str(), " must both be 2-D (rows, cols)");
  TP_CHECK(send.cols() == recv.cols(), op, ": send has ", send.cols(), " cols and recv ",
           recv.cols(), "; rows of one width travel, give both buffers the same cols");
  check_same_dtype(op, send, recv);
  for (const auto* counts : {&send_rows, &recv_rows}) {
    const char* which = counts == &send_rows ? "send_rows" : "recv_rows";
    const Tensor& buffer = counts == &send_rows ? send : recv;
    TP_CHECK(static_cast<int>(counts->size()) == size_, op, ": ", which, " has ", counts->size(),
             " counts; give one per rank of the group of ", size_);
    int64_t sum = 0;
    for (size_t p = 0; p < counts->size(); ++p) {
      TP_CHECK((*counts)[p] >= 0, op, ": ", which, "[", p, "] = ", (*counts)[p],
               "; a row count is 0 or more");
      sum += (*counts)[p];
    }
    TP_CHECK(sum == buffer.rows(), op, ": ", which, " adds up to ", sum, " rows but ",
             counts == &send_rows ? "send " : "recv ", buffer.shape().str(), " has ", buffer.rows(),
             "; the counts must cover the buffer exactly");
  }
}

size_t Communicator::record_all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                                         bool async) {
  const size_t index =
      ledger_.record("all_to_all_v", size_, send.numel(), async, send.element_size());
  // What crosses a link: every row but the block this rank keeps.
  ledger_.set_wire_bytes(index, static_cast<double>(send.rows() - send_rows[rank_]) *
                                    static_cast<double>(send.cols() * send.element_size()));
  return index;
}

void Communicator::all_to_all_v(const Tensor& send, const std::vector<int64_t>& send_rows,
                                Tensor& recv, const std::vector<int64_t>& recv_rows) {
  check_all_to_all_v(send, send_rows, recv, recv_rows);
  const size_t index = record_all_to_all_v(send, send_rows, false);
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, send.dtype()));
  do_all_to_all_v(send, send_rows, recv, recv_rows);
}

std::unique_ptr<Work> Communicator::all_to_all_v_async(const Tensor& send,
                                                       const std::vector<int64_t>& send_rows,
                                                       Tensor& recv,
                                                       const std::vector<int64_t>& recv_rows) {
  check_all_to_all_v(send, send_rows, recv, recv_rows);
  const size_t index = record_all_to_all_v(send, send_rows, true);
  CallTimer timer(ledger_, index, timeline_, flight(index, -1, send.dtype()));
  return timer.track(do_all_to_all_v_async(send, send_rows, recv, recv_rows));
}

std::unique_ptr<Work> Communicator::do_all_to_all_v_async(const Tensor& send,
                                                          const std::vector<int64_t>& send_rows,
                                                          Tensor& recv,
                                                          const std::vector<int64_t>& recv_rows) {
  do_all_to_all_v(send, send_rows, recv, recv_rows);
  return std::make_unique<CompletedWork>();
}

std::vector<int64_t> exchange_counts(Communicator& comm, Device& device,
                                     const std::vector<int64_t>& send_counts) {
  const int t = comm.size();
  const size_t n = send_counts.size();
  TP_CHECK(n > 0 && n % static_cast<size_t>(t) == 0, "exchange_counts: ", n,
           " counts; give the same number (at least one) for each rank of the group of ", t);
  const int64_t w = static_cast<int64_t>(n) / t;  // counts per peer
  // Each count as four 16-bit pieces, low first: integers below 2^16 are exact in f32.
  constexpr int kPieces = 4;
  std::vector<float> mine(n * kPieces);
  for (size_t i = 0; i < n; ++i) {
    TP_CHECK(send_counts[i] >= 0, "exchange_counts: count [", i, "] = ", send_counts[i],
             "; a row count is 0 or more");
    const uint64_t v = static_cast<uint64_t>(send_counts[i]);
    for (int k = 0; k < kPieces; ++k)
      mine[i * kPieces + k] = static_cast<float>(v >> (16 * k) & 0xffff);
  }
  const Tensor send = Tensor::from_host(device, Shape{t, w * kPieces}, mine);
  Tensor recv(device, Shape{t, w * kPieces});
  const std::vector<int64_t> ones(static_cast<size_t>(t), 1);
  comm.all_to_all_v(send, ones, recv, ones);
  const std::vector<float> got = recv.to_host();
  std::vector<int64_t> recv_counts(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t v = 0;
    for (int k = 0; k < kPieces; ++k) v |= static_cast<uint64_t>(got[i * kPieces + k]) << (16 * k);
    recv_counts[i] = static_cast<int64_t>(v);
  }
  return recv_counts;
}

void Communicator::do_all_to_all_v(const Tensor&, const std::vector<int64_t>&, Tensor&,
                                   const std::vector<int64_t>&) {
  unsupported("all_to_all_v");
}

void Communicator::do_send(const Tensor&, int) { unsupported("send"); }
void Communicator::do_recv(Tensor&, int) { unsupported("recv"); }
std::unique_ptr<Work> Communicator::do_send_async(const Tensor&, int) { unsupported("send_async"); }
std::unique_ptr<Work> Communicator::do_recv_async(Tensor&, int) { unsupported("recv_async"); }

std::unique_ptr<Work> Communicator::do_all_reduce_async(Tensor& x) {
  do_all_reduce(x, ReduceOp::Sum);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::do_all_gather_async(const Tensor& shard, Tensor& full) {
  do_all_gather(shard, full);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::do_reduce_scatter_async(const Tensor& full, Tensor& shard) {
  do_reduce_scatter(full, shard);
  return std::make_unique<CompletedWork>();
}

std::unique_ptr<Work> Communicator::do_send_recv_async(const Tensor& send, int to, Tensor& recv,
                                                       int from) {
  do_send_recv(send, to, recv, from);
  return std::make_unique<CompletedWork>();
}

// ---- SerialCommunicator --------------------------------------------------------------------------

void SerialCommunicator::do_all_gather(const Tensor& shard, Tensor& full) { full.copy_from(shard); }

void SerialCommunicator::do_reduce_scatter(const Tensor& full, Tensor& shard) {
  shard.copy_from(full);
}

void SerialCommunicator::do_send_recv(const Tensor& send, int, Tensor& recv, int) {
  recv.copy_from(send);
}

void SerialCommunicator::do_all_to_all_v(const Tensor& send, const std::vector<int64_t>&,
                                         Tensor& recv, const std::vector<int64_t>&) {
  recv.copy_from(send);  // one rank: its one block to itself (the shapes are checked equal)
}

std::unique_ptr<Communicator> SerialCommunicator::do_split(int, int) {
  return std::make_unique<SerialCommunicator>();
}

}  // namespace tp
