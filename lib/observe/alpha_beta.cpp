#include "observe/alpha_beta.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace tp {

namespace {

using Clock = std::chrono::steady_clock;

// The quickest of several tries: noise (other processes, a rank descheduled on a shared machine)
// only ever adds time, so the minimum is the best estimate of the link itself.
double quickest(const std::vector<double>& v) {
  TP_CHECK(!v.empty(), "the quickest of no tries");
  return *std::min_element(v.begin(), v.end());
}

// Calls, bytes and seconds of one row of the report.
struct Row {
  int64_t calls = 0;
  int64_t bytes = 0;
  double predicted = 0.0;
  double measured = 0.0;
};

std::string ratio_cell(const Row& r, bool async) {
  if (async) return "async";  // measured = the issue time only
  if (r.measured <= 0.0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r.predicted / r.measured);
  return buf;
}

}  // namespace

std::string AlphaBeta::str() const {
  char buf[80];
  if (alpha < 1e-3)
    std::snprintf(buf, sizeof buf, "α %.3g µs, β %.3g GB/s", alpha * 1e6, beta * 1e-9);
  else
    std::snprintf(buf, sizeof buf, "α %.3g ms, β %.3g GB/s", alpha * 1e3, beta * 1e-9);
  return buf;
}

int ring_steps(const std::string& op, int t) {
  ring_wire_bytes(op, t, 0);  // rejects an unknown op
  if (t <= 1) return 0;
  if (op == "all_reduce" || op == "all_reduce_max") return 2 * (t - 1);
  if (op == "send_recv" || op == "send" || op == "recv") return 1;
  return t - 1;  // all_gather, reduce_scatter, broadcast, all_to_all_v (one message per peer)
}

double predict_seconds(const std::string& op, int t, int64_t bytes, const AlphaBeta& ab) {
  const int steps = ring_steps(op, t);
  if (steps == 0) return 0.0;
  TP_CHECK(ab.beta > 0.0, "predict_seconds: β = ", ab.beta, " bytes/s; measure the link first");
  return steps * ab.alpha + ring_wire_bytes(op, t, bytes) / ab.beta;
}

AlphaBeta measure_alpha_beta(Communicator& comm, Device& device, int64_t large_bytes) {
  const int t = comm.size(), rank = comm.rank();
  if (t == 1) return {};
  TP_CHECK(large_bytes >= 1024, "measure_alpha_beta: the large transfer of ", large_bytes,
           " bytes is too small to see the bandwidth");
  CommLedger::Scope scope(comm.ledger(), "alpha_beta");
  const int peer = (rank ^ 1) < t ? (rank ^ 1) : -1;  // an odd last rank sits out
  const int64_t n = large_bytes / static_cast<int64_t>(sizeof(float));
  const int warmup = 2, pings = 20, transfers = 5;

  // 1. Time exchanges with the peer, each to completion (a GPU communicator returns before the
  //    transfer has ended, hence the synchronize).
  std::vector<double> ping_s, transfer_s;
  comm.barrier();
  if (peer >= 0) {
    Tensor small_out = Tensor::zeros(device, Shape{1}), small_in(device, Shape{1});
    Tensor large_out = Tensor::zeros(device, Shape{n}), large_in(device, Shape{n});
    auto exchange = [&](const Tensor& out, Tensor& in) {
      const auto start = Clock::now();
      comm.send_recv(out, peer, in, peer);
      device.synchronize();
      return std::chrono::duration<double>(Clock::now() - start).count();
    };
    // 2. α: the ping-pong, half a round trip per exchange.
    for (int i = 0; i < warmup + pings; ++i) {
      const double s = exchange(small_out, small_in);
      if (i >= warmup) ping_s.push_back(s);
    }
    // 3. β: the large transfer (one warm-up, which also touches the pages).
    for (int i = 0; i < 1 + transfers; ++i) {
      const double s = exchange(large_out, large_in);
      if (i >= 1) transfer_s.push_back(s);
    }
  }

  // 4. The slowest pair sets the pace: maxima over the ranks (the one sitting out adds zeros).
  Tensor agreed =
      Tensor::from_host(device, Shape{2},
                        {static_cast<float>(ping_s.empty() ? 0.0 : quickest(ping_s)),
                         static_cast<float>(transfer_s.empty() ? 0.0 : quickest(transfer_s))});
  comm.all_reduce(agreed, ReduceOp::Max);
  const std::vector<float> v = agreed.to_host();
  AlphaBeta ab;
  ab.alpha = v[0];
  // The transfer is one message: α + large_bytes / β. Should α swallow it (a noisy ping), the
  // bandwidth is bounded by the whole transfer time instead.
  const double wire = v[1] - v[0] > 0.1 * v[1] ? v[1] - v[0] : v[1];
  ab.beta = static_cast<double>(n * static_cast<int64_t>(sizeof(float))) / wire;
  return ab;
}

std::string prediction_report(const CommLedger& ledger, size_t from, size_t to, const AlphaBeta& ab,
                              const std::string& prefix) {
  const auto& records = ledger.records();
  TP_CHECK(from <= to && to <= records.size(), "prediction_report: records [", from, ", ", to,
           ") outside the ledger of ", records.size());
  // Keys: (op, bytes per call, async) and (label, op, async); std::map keeps them sorted.
  std::map<std::tuple<std::string, int64_t, bool>, Row> by_op;
  std::map<std::tuple<std::string, std::string, bool>, Row> by_label;
  Row total;
  size_t label_width = 5;
  for (size_t i = from; i < to; ++i) {
    const CommRecord& r = records[i];
    // all_to_all_v: its own wire bytes (its counts, not N, say what leaves the rank).
    const double predicted =
        r.op == "all_to_all_v" && ring_steps(r.op, r.group_size) > 0 && ab.beta > 0.0
            ? ring_steps(r.op, r.group_size) * ab.alpha + r.wire_bytes / ab.beta
            : predict_seconds(r.op, r.group_size, r.bytes, ab);
    const std::string label = r.label.empty() ? "-" : r.label;
    label_width = std::max(label_width, label.size());
    for (Row* row : {&by_op[{r.op, r.bytes, r.async}], &by_label[{label, r.op, r.async}], &total}) {
      if (row == &total && r.async) continue;  // the total compares blocking calls only
      row->calls += 1;
      row->bytes += r.bytes;
      row->predicted += predicted;
      row->measured += r.seconds;
    }
  }

  std::string out;
  char line[512];
  auto add = [&](const char* text) { out += (out.empty() ? "" : "\n") + prefix + text; };
  std::snprintf(line, sizeof line,
                "# α–β model (%s) against the measured time of %zu collectives (this rank's "
                "ledger)",
                ab.str().c_str(), to - from);
  add(line);
  add("#             op  bytes/call  calls  predicted_us  measured_us  pred/meas");
  for (const auto& [key, row] : by_op) {
    const auto& [op, bytes, async] = key;
    std::snprintf(line, sizeof line, "%16s  %10lld  %5lld  %12.1f  %11.1f  %9s", op.c_str(),
                  static_cast<long long>(bytes), static_cast<long long>(row.calls),
                  row.predicted * 1e6, row.measured * 1e6, ratio_cell(row, async).c_str());
    add(line);
  }
  const int w = static_cast<int>(label_width);
  std::snprintf(line, sizeof line, "# %*s  %14s  calls  bytes_total  predicted_us  measured_us  %s",
                w - 2, "label", "op", "pred/meas");
  add(line);
  for (const auto& [key, row] : by_label) {
    const auto& [label, op, async] = key;
    std::snprintf(line, sizeof line, "%*s  %14s  %5lld  %11lld  %12.1f  %11.1f  %9s", w,
                  label.c_str(), op.c_str(), static_cast<long long>(row.calls),
                  static_cast<long long>(row.bytes), row.predicted * 1e6, row.measured * 1e6,
                  ratio_cell(row, async).c_str());
    add(line);
  }
  std::snprintf(line, sizeof line, "%*s  %14s  %5lld  %11lld  %12.1f  %11.1f  %9s", w,
                "total (blocking)", "", static_cast<long long>(total.calls),
                static_cast<long long>(total.bytes), total.predicted * 1e6, total.measured * 1e6,
                ratio_cell(total, false).c_str());
  add(line);
  return out;
}

}  // namespace tp
