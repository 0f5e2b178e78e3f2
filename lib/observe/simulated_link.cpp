#include "observe/simulated_link.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tp {

namespace {

using Clock = std::chrono::steady_clock;

// Sleeps until `deadline`, waking `lateness` early (the OS wakes a sleeper that late) and yielding
// the processor for the rest.
void sleep_then_yield(Clock::time_point deadline, Clock::duration lateness) {
  if (Clock::now() + lateness < deadline) std::this_thread::sleep_until(deadline - lateness);
  while (Clock::now() < deadline) std::this_thread::yield();
}

// How late std::this_thread::sleep_until wakes this thread: the median of a few short sleeps.
Clock::duration measure_lateness() {
  std::vector<Clock::duration> late;
  for (int i = 0; i < 9; ++i) {
    const Clock::time_point target = Clock::now() + std::chrono::microseconds(200);
    std::this_thread::sleep_until(target);
    late.push_back(Clock::now() - target);
  }
  std::sort(late.begin(), late.end());
  return late[late.size() / 2];
}

// The Work of an async call over the link: complete when the inner Work is and the deadline passed.
class DelayedWork : public Work {
 public:
  DelayedWork(std::unique_ptr<Work> inner, Clock::time_point deadline, Clock::duration lateness)
      : inner_(std::move(inner)), deadline_(deadline), lateness_(lateness) {}
  void wait() override {
    inner_->wait();
    inner_done_ = true;
    sleep_then_yield(deadline_, lateness_);
  }
  bool test() override {
    inner_done_ = inner_done_ || inner_->test();
    return inner_done_ && Clock::now() >= deadline_;
  }

 private:
  std::unique_ptr<Work> inner_;
  Clock::time_point deadline_;
  Clock::duration lateness_;
  bool inner_done_ = false;
};

int64_t bytes_of(const Tensor& x) { return static_cast<int64_t>(x.bytes()); }  // by dtype

// The presets: see the table in simulated_link.h for the sources.
const Link kPresets[] = {
    {"nvlink", {3e-6, 450e9}},
    {"ib", {5e-6, 50e9}},
    {"10gbe", {30e-6, 1.25e9}},
};

// The custom form's bounds (simulated_link.h).
constexpr double kMaxAlphaUs = 10000, kMinBetaGBps = 0.1, kMaxBetaGBps = 1e6;

// A finite number filling all of `text`, or NAN.
double parse_number(const std::string& text) {
  if (text.empty()) return NAN;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(v) ? v : NAN;
}

}  // namespace

std::string Link::str() const { return name + " (" + model.str() + ")"; }

std::optional<Link> parse_link(const std::string& text) {
  if (text == "none") return std::nullopt;
  for (const Link& preset : kPresets)
    if (text == preset.name) return preset;
  const size_t comma = text.find(',');
  if (comma != std::string::npos) {
    const std::string a = text.substr(0, comma), b = text.substr(comma + 1);
    const double alpha_us = parse_number(a);
    const double beta_gbps = parse_number(b);
    if (alpha_us >= 0.0 && beta_gbps > 0.0) {
      // Bounds that keep a simulated run finite and its delays real: a larger α, or a smaller β,
      // makes every step of a small model take minutes, and a β near 0 overflows the deadline.
      TP_CHECK_INPUT(alpha_us <= kMaxAlphaUs, "--link=", text, ": α = ", a, " µs is more than the ",
                     kMaxAlphaUs,
                     " µs (10 ms, hundreds of times a network's latency) this simulation accepts, "
                     "which keeps a run finite; give α in [0, ",
                     kMaxAlphaUs, "] µs");
      TP_CHECK_INPUT(beta_gbps >= kMinBetaGBps && beta_gbps <= kMaxBetaGBps, "--link=", text,
                     ": β = ", b, " GB/s is outside the [", kMinBetaGBps, ", ", kMaxBetaGBps,
                     "] GB/s this simulation accepts (0.1 GB/s is slower than 1 Gb Ethernet; a "
                     "slower link makes a run endless, one near 0 removes the delay)");
      return Link{"link", {alpha_us * 1e-6, beta_gbps * 1e9}};
    }
  }
  TP_CHECK_INPUT(false, "--link=", text,
                 ": use none, nvlink, ib, 10gbe or α_us,β_GBps with 0 ≤ α ≤ ", kMaxAlphaUs, " and ",
                 kMinBetaGBps, " ≤ β ≤ ", kMaxBetaGBps, " (e.g. --link 5,12.5)");
  return std::nullopt;
}

SimulatedLink::SimulatedLink(std::unique_ptr<Communicator> inner, Link link)
    : SimulatedLink(std::move(inner), std::move(link), measure_lateness()) {}

SimulatedLink::SimulatedLink(std::unique_ptr<Communicator> inner, Link link,
                             Clock::duration lateness)
    : ForwardingCommunicator(std::move(inner)), link_(std::move(link)), lateness_(lateness) {}

std::string SimulatedLink::name() const {
  return "simulated " + link_.str() + " over " + inner().name();
}

// A receive completes when the message has arrived: it is charged the send's time (α + N/β).
Clock::time_point SimulatedLink::deadline(const Forwarded& call) const {
  const char* op = std::strcmp(call.op, "recv") == 0 ? "send" : call.op;
  const double s = predict_seconds(op, size(), bytes_of(*call.buffer), link_.model);
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Each call: the deadline from now, the real call, then the wait (blocking) or a Work that waits.

void SimulatedLink::around(const Forwarded& call, const std::function<void()>& run) {
  if (call.buffer == nullptr) return run();  // a barrier moves no data
  const auto due = deadline(call);
  run();
  sleep_then_yield(due, lateness_);
}

std::unique_ptr<Work> SimulatedLink::around_async(
    const Forwarded& call, const std::function<std::unique_ptr<Work>()>& issue) {
  const auto due = deadline(call);
  return std::make_unique<DelayedWork>(issue(), due, lateness_);
}

std::unique_ptr<Communicator> SimulatedLink::decorate(std::unique_ptr<Communicator> child) {
  // The private constructor: the sub-communicator reuses the measured lateness.
  return std::unique_ptr<Communicator>(new SimulatedLink(std::move(child), link_, lateness_));
}

bool is_simulated(const Communicator& comm) {
  return dynamic_cast<const SimulatedLink*>(&comm) != nullptr;
}

}  // namespace tp
