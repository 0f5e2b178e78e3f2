#include "parallel/pipeline_parallel.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "core/exercise.h"
#include "core/span_sink.h"
#include "observe/timer.h"

namespace tp {

Schedule parse_schedule(const std::string& name) {
  if (name == "afab") return Schedule::Afab;
  if (name == "1f1b") return Schedule::OneFOneB;
  TP_CHECK_INPUT(false, "--schedule=", name, " is not a pipeline schedule; choose afab or 1f1b");
  return Schedule::Afab;
}

const char* schedule_name(Schedule s) { return s == Schedule::Afab ? "afab" : "1f1b"; }

std::vector<int64_t> stage_layer_counts(int64_t layers, int stages,
                                        const std::vector<int64_t>& chosen) {
  if (!chosen.empty()) return chosen;
  std::vector<int64_t> counts(static_cast<size_t>(stages), layers / stages);
  for (int64_t s = 0; s < layers % stages; ++s) ++counts[static_cast<size_t>(s)];
  return counts;
}

std::vector<int64_t> parse_pp_layers(const std::string& text) {
  std::vector<int64_t> out;
  if (text.empty()) return out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    const bool digits = !item.empty() && item.size() <= 9 &&
                        item.find_first_not_of("0123456789") == std::string::npos;
    TP_CHECK_INPUT(digits, "--pp-layers=", text, ": '", item,
                   "' is not a block count; give one count per stage, e.g. --pp-layers 3,5");
    out.push_back(std::stoll(item));
    at = comma + 1;
  }
  return out;
}

std::vector<std::string> pipeline_problems(int64_t layers, int stages, int m, Schedule schedule,
                                           const std::vector<int64_t>& chosen) {
  std::vector<std::string> p;
  if (stages < 1) {
    p.push_back("--pp=" + std::to_string(stages) + " stages: use 1 or more");
    return p;
  }
  if (stages > layers)
    p.push_back("--pp=" + std::to_string(stages) + " stages for " + std::to_string(layers) +
                " blocks: every stage needs at least one block; use --pp <= " +
                std::to_string(layers) + " or more --layers");
  if (schedule == Schedule::OneFOneB && stages > 1 && m < stages)
    p.push_back("--schedule 1f1b with --micro-batches=" + std::to_string(m) +
                " < --pp=" + std::to_string(stages) +
                ": 1F1B needs m >= N micro-batches to fill the pipe; use " + "--micro-batches " +
                std::to_string(stages) + " (or more) or --schedule afab");
  if (!chosen.empty()) {
    int64_t sum = 0;
    bool positive = true;
    for (int64_t c : chosen) {
      sum += c;
      positive = positive && c >= 1;
    }
    if (static_cast<int>(chosen.size()) != stages || sum != layers || !positive)
      p.push_back("--pp-layers lists " + std::to_string(chosen.size()) + " stages of " +
                  std::to_string(sum) + " blocks in all, but --pp=" + std::to_string(stages) +
                  " and --layers=" + std::to_string(layers) + ": give " + std::to_string(stages) +
                  " counts of at least 1 that sum to " + std::to_string(layers));
  }
  return p;
}

std::string PipelineOp::label() const { return (forward ? "F" : "B") + std::to_string(micro); }

#if TP_EXERCISE != 9  // exercises/09_one_f_one_b.cpp
std::vector<PipelineOp> schedule_ops(Schedule schedule, int stages, int stage, int m) {
  std::vector<PipelineOp> ops;
  if (schedule == Schedule::Afab) {
    for (int k = 0; k < m; ++k) ops.push_back({true, k});
    for (int k = 0; k < m; ++k) ops.push_back({false, k});
    return ops;
  }
  // 1F1B: the warm-up fills the pipe below this stage; then each new forward frees the oldest.
  const int warmup = std::min(stages - stage - 1, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({true, f});
  for (; f < m; ++f, ++b) {
    ops.push_back({true, f});
    ops.push_back({false, b});
  }
  for (; b < m; ++b) ops.push_back({false, b});
  return ops;
}
#endif

int in_flight_formula(Schedule schedule, int stages, int stage, int m) {
  return schedule == Schedule::Afab ? m : std::min(stages - stage, m);
}

double bubble_formula(int stages, int m) {
  return static_cast<double>(stages - 1) / static_cast<double>(m + stages - 1);
}

double PipelineRecord::bubble() const {
  double busy = 0;
  for (const Span& s : ops) busy += s.end - s.start;
  return seconds > 0 ? 1.0 - busy / seconds : 0.0;
}

std::string PipelineRecord::row() const {
  std::string out;
  for (const Span& s : ops) out += (out.empty() ? "" : " ") + s.op.label();
  return out;
}

void run_schedule(Communicator& pp, Device& device, PipelineStage& stage, Schedule schedule, int m,
                  PipelineRecord* record) {
  const int n = pp.size(), s = pp.rank();
  const bool first = s == 0, last = s == n - 1;
  double t0 = 0;
  if (record) {
    *record = PipelineRecord{};
    pp.barrier();
    t0 = now();
  }
  // The transfers: one tensor from a neighbour, one to it, or both at once with the same
  // neighbour (1F1B's steady state, where both stages would otherwise send first).
  const Shape shape = stage.activation_shape();
  const Dtype dtype = stage.activation_dtype();  // the sender's: both sides run the same config
  auto recv_from = [&](int peer) {
    Tensor x(device, shape, dtype);
    CommLedger::Scope scope(pp.ledger(), peer < s ? "pipeline activation" : "pipeline gradient");
    pp.recv(x, peer);
    return x;
  };
  auto check_dtype = [&](const Tensor& x) {
    TP_CHECK(x.dtype() == dtype, "run_schedule: stage ", s, " sends a ", dtype_name(x.dtype()),
             " tensor where its neighbour receives ", dtype_name(dtype));
  };
  auto send_to = [&](const Tensor& x, int peer) {
    check_dtype(x);
    CommLedger::Scope scope(pp.ledger(), peer > s ? "pipeline activation" : "pipeline gradient");
    pp.send(x, peer);
  };
  auto exchange = [&](const Tensor& x, int peer) {
    check_dtype(x);
    Tensor y(device, shape, dtype);
    CommLedger::Scope scope(pp.ledger(), "pipeline activation and gradient");
    pp.send_recv(x, peer, y, peer);
    return y;
  };
  // One op: timed for the record, a Phase span on the device's timeline.
  auto run = [&](PipelineOp op, const Tensor& in) {
    const double start = record ? now() - t0 : 0;
    SpanSink* timeline = device.timeline();
    const double phase_start = timeline ? timeline->now() : 0;
    Tensor out = op.forward ? stage.forward(op.micro, in) : stage.backward(op.micro, in);
    if (timeline) {
      Span span;
      span.kind = SpanKind::Phase;
      span.name = op.label();
      span.start = phase_start;
      span.end = timeline->now();
      timeline->record(span);
    }
    if (record) {
      record->ops.push_back({op, start, now() - t0});
      record->peak_activation_bytes = std::max(record->peak_activation_bytes, stage.kept_bytes());
      record->peak_in_flight = std::max(record->peak_in_flight, stage.in_flight());
    }
    return out;
  };
  auto forward = [&](int k) {  // receive, compute, send on
    const Tensor out = run({true, k}, first ? Tensor() : recv_from(s - 1));
    if (!last) send_to(out, s + 1);
  };
  auto backward = [&](int k) {
    const Tensor din = run({false, k}, last ? Tensor() : recv_from(s + 1));
    if (!first) send_to(din, s - 1);
  };
  if (schedule == Schedule::Afab) {
    for (int k = 0; k < m; ++k) forward(k);
    for (int k = 0; k < m; ++k) backward(k);
  } else {
    // 1F1B in the order of schedule_ops. In the steady state stage s sends forward micro-batch
    // f's output while stage s + 1 sends backward micro-batch b's input gradient: each such pair
    // is one send_recv on both sides, so neither waits for the other to receive first.
    const int warmup = std::min(n - s - 1, m), steady = m - warmup;
    for (int k = 0; k < warmup; ++k) forward(k);
    Tensor in = steady > 0 && !first ? recv_from(s - 1) : Tensor();
    for (int i = 0; i < steady; ++i) {
      const Tensor out = run({true, warmup + i}, in);
      const Tensor dout = last ? Tensor() : exchange(out, s + 1);  // act out, gradient i in
      const Tensor din = run({false, i}, dout);
      if (first) continue;
      if (i + 1 == steady)
        send_to(din, s - 1);
      else
        in = exchange(din, s - 1);  // gradient i out, the next forward's input in
    }
    for (int k = steady; k < m; ++k) backward(k);
  }
  if (record) {
    pp.barrier();
    record->seconds = now() - t0;
  }
}

namespace {
// An integer as two floats (exact below 2^48): the payload is a float tensor.
void put_count(std::vector<float>& v, int64_t n) {
  v.push_back(static_cast<float>(n >> 24));
  v.push_back(static_cast<float>(n & ((int64_t{1} << 24) - 1)));
}
int64_t get_count(const std::vector<float>& v, size_t& at) {
  TP_CHECK(at + 2 <= v.size(), "gather_to_first_stage: a truncated payload");
  const int64_t n = (static_cast<int64_t>(v[at]) << 24) + static_cast<int64_t>(v[at + 1]);
  at += 2;
  return n;
}

std::vector<float> encode(const std::vector<NamedHostTensor>& tensors) {
  std::vector<float> v;
  put_count(v, static_cast<int64_t>(tensors.size()));
  for (const NamedHostTensor& t : tensors) {
    put_count(v, static_cast<int64_t>(t.name.size()));
    for (unsigned char c : t.name) v.push_back(static_cast<float>(c));
    put_count(v, static_cast<int64_t>(t.shape.size()));
    for (int64_t d : t.shape) put_count(v, d);
    put_count(v, static_cast<int64_t>(t.values.size()));
    v.insert(v.end(), t.values.begin(), t.values.end());
  }
  return v;
}

void decode(const std::vector<float>& v, std::vector<NamedHostTensor>& out) {
  size_t at = 0;
  const int64_t count = get_count(v, at);
  for (int64_t i = 0; i < count; ++i) {
    NamedHostTensor t;
    const int64_t chars = get_count(v, at);
    TP_CHECK(at + static_cast<size_t>(chars) <= v.size(), "gather_to_first_stage: bad name");
    for (int64_t c = 0; c < chars; ++c) t.name.push_back(static_cast<char>(v[at++]));
    const int64_t dims = get_count(v, at);
    for (int64_t d = 0; d < dims; ++d) t.shape.push_back(get_count(v, at));
    const int64_t n = get_count(v, at);
    TP_CHECK(at + static_cast<size_t>(n) <= v.size(), "gather_to_first_stage: bad values");
    t.values.assign(v.begin() + static_cast<std::ptrdiff_t>(at),
                    v.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(n)));
    at += static_cast<size_t>(n);
    out.push_back(std::move(t));
  }
}
}  // namespace

std::vector<NamedHostTensor> gather_to_first_stage(Communicator& pp, Device& device,
                                                   const std::vector<NamedHostTensor>& mine) {
  if (pp.size() == 1) return mine;
  CommLedger::Scope scope(pp.ledger(), "pipeline checkpoint");
  if (pp.rank() != 0) {
    const std::vector<float> payload = encode(mine);
    std::vector<float> length;
    put_count(length, static_cast<int64_t>(payload.size()));
    pp.send(Tensor::from_host(device, Shape{2}, length), 0);
    pp.send(Tensor::from_host(device, Shape{static_cast<int64_t>(payload.size())}, payload), 0);
    return mine;
  }
  std::vector<NamedHostTensor> all = mine;
  for (int s = 1; s < pp.size(); ++s) {
    Tensor length(device, Shape{2});
    pp.recv(length, s);
    size_t at = 0;
    const int64_t n = get_count(length.to_host(), at);
    Tensor payload(device, Shape{n});
    pp.recv(payload, s);
    decode(payload.to_host(), all);
  }
  return all;
}

}  // namespace tp
