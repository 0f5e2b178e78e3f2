// timeline.cpp — recording, the totals, the gather to rank 0 (spans as bytes carried in f32
// tensors), and the two writers (Chrome trace JSON, SVG Gantt chart).
#include "observe/timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/communicator.h"
#include "core/device.h"
#include "core/error.h"
#include "observe/svg_plot.h"

namespace tp {

Timeline::Timeline(int rank) : origin_(std::chrono::steady_clock::now()), rank_(rank) {}

double Timeline::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void Timeline::record(Span span) {
  span.rank = rank_;
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.push_back(std::move(span));
}

std::vector<Span> Timeline::spans() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_;
}

size_t Timeline::mark() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spans_.size();
}

CommTotals Timeline::totals_since(size_t mark) const {
  std::lock_guard<std::mutex> lock(mutex_);
  CommTotals t;
  for (size_t i = mark; i < spans_.size(); ++i) {
    const Span& s = spans_[i];
    if (s.kind == SpanKind::Kernel) t.compute += s.seconds();
    if (s.kind == SpanKind::Collective) t.communication += s.seconds();
    if (s.kind == SpanKind::Wait || (s.kind == SpanKind::Collective && !s.async))
      t.exposed += s.seconds();
  }
  t.hidden = std::max(0.0, t.communication - t.exposed);
  return t;
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  spans_.clear();
}

// ---- gather: spans → bytes → f32 tensors → bytes → spans ----------------------------------------
//
// A span is written as: kind (1 byte), async (1), start, end (f64 bits, 8 each), bytes (8), then
// name and label, each as a 4-byte length and its characters; integers little-endian. The bytes
// travel three to a float, as the integer b0 + 2⁸ b1 + 2¹⁶ b2 < 2²⁴, which f32 holds exactly: no
// float is ever a NaN or a denormal, so any backend that moves floats moves these unchanged.

namespace {

void put(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_text(std::vector<uint8_t>& out, const std::string& s) {
  put(out, s.size(), 4);
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

// Reads the bytes written by put() and put_text(), checking every length against what is left.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool done() const { return at_ == n_; }
  uint64_t get(int n) {
    TP_CHECK(at_ + n <= n_, "Timeline::gather: truncated span record");
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[at_ + i]) << (8 * i);
    at_ += n;
    return v;
  }
  double get_double() {
    const uint64_t u = get(8);
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
  }
  std::string get_text() {
    const size_t len = get(4);
    TP_CHECK(at_ + len <= n_, "Timeline::gather: truncated span name");
    std::string s(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

std::vector<uint8_t> encode(const std::vector<Span>& spans, double shift) {
  std::vector<uint8_t> out;
  for (const Span& s : spans) {
    put(out, static_cast<uint64_t>(s.kind), 1);
    put(out, s.async ? 1 : 0, 1);
    put(out, double_bits(s.start + shift), 8);
    put(out, double_bits(s.end + shift), 8);
    put(out, static_cast<uint64_t>(s.bytes), 8);
    put_text(out, s.name);
    put_text(out, s.label);
  }
  return out;
}

std::vector<Span> decode(const uint8_t* p, size_t n, int rank) {
  std::vector<Span> spans;
  Reader in(p, n);
  while (!in.done()) {
    Span s;
    const uint64_t kind = in.get(1);
    TP_CHECK(kind <= static_cast<uint64_t>(SpanKind::Phase), "Timeline::gather: bad span kind ",
             kind);
    s.kind = static_cast<SpanKind>(kind);
    s.async = in.get(1) != 0;
    s.start = in.get_double();
    s.end = in.get_double();
    s.bytes = static_cast<int64_t>(in.get(8));
    s.name = in.get_text();
    s.label = in.get_text();
    s.rank = rank;
    spans.push_back(std::move(s));
  }
  return spans;
}

// Bytes → floats (three per float, zero-padded to `floats`) and back.
std::vector<float> pack(const std::vector<uint8_t>& bytes, size_t floats) {
  std::vector<float> out(floats, 0.0f);
  for (size_t i = 0; i < bytes.size(); ++i)
    out[i / 3] += static_cast<float>(static_cast<uint32_t>(bytes[i]) << (8 * (i % 3)));
  return out;
}

std::vector<uint8_t> unpack(const float* f, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<uint8_t>(static_cast<uint32_t>(f[i / 3]) >> (8 * (i % 3)));
  return out;
}

}  // namespace

void Timeline::gather(Communicator& comm, Device& device) {
  const int t = comm.size();
  // 1. A common origin: the exit of a barrier, the same instant on every rank (up to its skew).
  comm.barrier();
  const std::vector<uint8_t> mine = encode(spans(), -now());
  // 2. The byte counts of every rank, each as two floats of 24 bits (exact in f32).
  const uint64_t n = mine.size();
  Tensor count = Tensor::from_host(device, Shape{2},
                                   {static_cast<float>(n & 0xFFFFFF), static_cast<float>(n >> 24)});
  Tensor counts(device, Shape{t, 2});
  comm.all_gather(count, counts);
  const std::vector<float> c = counts.to_host();
  std::vector<size_t> bytes(t);
  size_t longest = 1;
  for (int r = 0; r < t; ++r) {
    bytes[r] = static_cast<size_t>(c[2 * r]) + (static_cast<size_t>(c[2 * r + 1]) << 24);
    longest = std::max(longest, (bytes[r] + 2) / 3);
  }
  // 3. Every rank's bytes, padded to the longest, in one all-gather.
  Tensor block =
      Tensor::from_host(device, Shape{static_cast<int64_t>(longest)}, pack(mine, longest));
  Tensor all(device, Shape{t, static_cast<int64_t>(longest)});
  comm.all_gather(block, all);
  if (comm.rank() != 0) return;
  // 4. Rank 0 decodes them; the earliest span starts at 0.
  const std::vector<float> f = all.to_host();
  std::vector<Span> every;
  for (int r = 0; r < t; ++r) {
    const std::vector<uint8_t> b = unpack(f.data() + r * longest, bytes[r]);
    for (Span& s : decode(b.data(), b.size(), r)) every.push_back(std::move(s));
  }
  double first = std::numeric_limits<double>::infinity();
  for (const Span& s : every) first = std::min(first, s.start);
  for (Span& s : every) s.start -= first, s.end -= first;
  std::lock_guard<std::mutex> lock(mutex_);
  spans_ = std::move(every);
}

// ---- layout: rows of the chart and threads of the trace -----------------------------------------

namespace {

// The colour group of a span.
const char* category(const Span& s) {
  // Ring attention's K, V and dK, dV passes (context parallelism: parallel/ring_attention.h)
  if (s.kind == SpanKind::Collective && s.label.find("ring attention") != std::string::npos)
    return "ring";
  if (s.kind == SpanKind::Collective) return "collective";
  if (s.kind == SpanKind::Wait) return "wait";
  if (s.kind == SpanKind::Phase) return "phase";
  if (s.name == "gemm") return "gemm";
  if (s.name.compare(0, 9, "attention") == 0) return "attention";
  return "kernel";
}

struct Category {
  const char* key;
  const char* legend;
  const char* colour;
};
const Category kCategories[] = {
    {"gemm", "GEMM", "#4e79a7"},
    {"attention", "attention", "#b07aa1"},
    {"kernel", "norm, elementwise, other kernels", "#59a14f"},
    {"collective", "collective", "#f28e2b"},
    {"ring", "ring attention (CP)", "#76b7b2"},
    {"wait", "wait (issue, Work::wait)", "#e15759"},
    {"phase", "pipeline op (F/B of a micro-batch)", "#bab0ac"},
};

const char* colour(const Span& s) {
  for (const Category& c : kCategories)
    if (std::strcmp(c.key, category(s)) == 0) return c.colour;
  return "#999999";
}

// A row: spans of one rank and track that do not overlap. A track whose spans overlap (async
// collectives in flight together) takes as many rows as it needs, each span in the first row
// where it fits.
// The tracks of one rank, in the order they are drawn.
enum Track { kPipelineTrack, kComputeTrack, kCommunicationTrack };
int track_of(const Span& s) {
  return s.kind == SpanKind::Collective ? kCommunicationTrack
         : s.kind == SpanKind::Phase    ? kPipelineTrack
                                        : kComputeTrack;
}

struct Row {
  int rank;
  int track;  // Track
  int lane;
  bool communication() const { return track == kCommunicationTrack; }
  std::string name() const {
    const char* names[] = {"pipeline", "compute", "communication"};
    return std::string(names[track]) + (lane > 0 ? " " + std::to_string(lane + 1) : "");
  }
};

struct Layout {
  std::vector<Row> rows;       // ordered by rank, then pipeline, compute, communication, lane
  std::vector<size_t> row_of;  // row_of[i]: the row of span i
};

Layout layout(const std::vector<Span>& spans) {
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return spans[a].start < spans[b].start; });
  // (rank, track) → the end of the last span of each lane.
  std::map<std::pair<int, int>, std::vector<double>> lanes;
  std::vector<std::tuple<int, int, int>> where(spans.size());
  for (size_t i : order) {
    const Span& s = spans[i];
    const int comm = track_of(s);
    std::vector<double>& ends = lanes[{s.rank, comm}];
    size_t lane = 0;
    while (lane < ends.size() && ends[lane] > s.start) ++lane;
    if (lane == ends.size()) ends.push_back(s.end);
    ends[lane] = s.end;
    where[i] = {s.rank, comm, static_cast<int>(lane)};
  }
  Layout out;
  std::map<std::tuple<int, int, int>, size_t> index;
  for (const auto& [key, ends] : lanes)  // std::map: by rank, then track
    for (size_t lane = 0; lane < ends.size(); ++lane) {
      index[{key.first, key.second, static_cast<int>(lane)}] = out.rows.size();
      out.rows.push_back({key.first, key.second, static_cast<int>(lane)});
    }
  for (size_t i = 0; i < spans.size(); ++i) out.row_of.push_back(index[where[i]]);
  return out;
}

// `s` as a JSON string literal (quotes, backslashes and control characters escaped; bytes that
// are not UTF-8 replaced by U+FFFD, so the trace always parses).
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string fmt(const char* f, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Microseconds, rounded to the nanosecond: ts and ts + dur of two spans that touch stay equal.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }

}  // namespace

// ---- Chrome trace event format ------------------------------------------------------------------

std::string Timeline::trace_json() const {
  const std::vector<Span> all = spans();
  const Layout lay = layout(all);
  // Threads: 1, 2, … within each rank, in row order.
  std::vector<int> tid(lay.rows.size());
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string& e) {
    out += (first ? "" : ",\n") + e;
    first = false;
  };
  for (size_t i = 0; i < lay.rows.size(); ++i) {
    const Row& row = lay.rows[i];
    const bool new_rank = i == 0 || lay.rows[i - 1].rank != row.rank;
    tid[i] = new_rank ? 1 : tid[i - 1] + 1;
    const std::string pid = std::to_string(row.rank), t = std::to_string(tid[i]);
    if (new_rank) {
      event("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + pid +
            ", \"tid\": 0, \"args\": {\"name\": \"rank " + pid + "\"}}");
      event("{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + pid +
            ", \"tid\": 0, \"args\": {\"sort_index\": " + pid + "}}");
    }
    event("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + pid + ", \"tid\": " + t +
          ", \"args\": {\"name\": " + json_string(row.name()) + "}}");
    event("{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": " + pid + ", \"tid\": " + t +
          ", \"args\": {\"sort_index\": " + t + "}}");
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const Span& s = all[i];
    const double ts = micros(s.start), te = micros(s.end);
    std::string e = "{\"ph\": \"X\", \"name\": " + json_string(s.name) + ", \"cat\": \"" +
                    category(s) + "\", \"pid\": " + std::to_string(s.rank) +
                    ", \"tid\": " + std::to_string(tid[lay.row_of[i]]) +
                    ", \"ts\": " + fmt("%.3f", ts) + ", \"dur\": " + fmt("%.3f", te - ts);
    if (s.kind == SpanKind::Collective)
      e += ", \"args\": {\"bytes\": " + std::to_string(s.bytes) +
           ", \"async\": " + (s.async ? "true" : "false") + ", \"label\": " + json_string(s.label) +
           "}";
    event(e + "}");
  }
  return out + "\n]}\n";
}

void Timeline::write_trace_json(const std::string& path, const std::string& what) const {
  write_text_file(path, trace_json(), what);
}

// ---- SVG Gantt chart ----------------------------------------------------------------------------

std::string Timeline::svg() const {
  const std::vector<Span> all = spans();
  const Layout lay = layout(all);
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const Span& s : all) t0 = std::min(t0, s.start), t1 = std::max(t1, s.end);
  if (all.empty()) t0 = 0, t1 = 1e-3;
  if (t1 <= t0) t1 = t0 + 1e-6;
  // Rows of 18 px, 10 px between ranks; the legend above, the time axis below.
  const double W = 1200, left = 160, right = 20, top = 64, row_h = 18, rank_gap = 10;
  std::vector<double> row_y(lay.rows.size());
  double y = top;
  for (size_t i = 0; i < lay.rows.size(); ++i) {
    if (i > 0 && lay.rows[i].rank != lay.rows[i - 1].rank) y += rank_gap;
    row_y[i] = y;
    y += row_h;
  }
  const double plot_bottom = y, H = y + 48, plot_w = W - left - right;
  auto px = [&](double t) { return left + (t - t0) / (t1 - t0) * plot_w; };

  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", W) +
                  "\" height=\"" + fmt("%.0f", H) +
                  "\" font-family=\"sans-serif\" font-size=\"11\">\n"
                  "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
                  "<text x=\"" +
                  fmt("%.0f", W / 2) +
                  "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">Timeline: compute and "
                  "communication per rank" +
                  (title_.empty() ? std::string() : " — " + xml_escape(title_)) + "</text>\n";
  // Legend.
  double lx = left;
  for (const Category& c : kCategories) {
    s += "<rect x=\"" + fmt("%.1f", lx) + "\" y=\"32\" width=\"12\" height=\"12\" fill=\"" +
         c.colour + "\"/>\n<text x=\"" + fmt("%.1f", lx + 16) + "\" y=\"42\">" + c.legend +
         "</text>\n";
    lx += 40 + 6.5 * static_cast<double>(std::strlen(c.legend));
  }
  // Rows: a label and a light band each.
  for (size_t i = 0; i < lay.rows.size(); ++i) {
    const Row& row = lay.rows[i];
    s += "<rect x=\"" + fmt("%.1f", left) + "\" y=\"" + fmt("%.1f", row_y[i]) + "\" width=\"" +
         fmt("%.1f", plot_w) + "\" height=\"" + fmt("%.1f", row_h - 1) + "\" fill=\"" +
         (row.communication() ? "#fbf6ef" : "#f3f5f8") + "\"/>\n";
    s += "<text x=\"" + fmt("%.1f", left - 6) + "\" y=\"" + fmt("%.1f", row_y[i] + row_h - 5) +
         "\" text-anchor=\"end\">rank " + std::to_string(row.rank) + " " + row.name() + "</text>\n";
  }
  // Time axis in ms: round ticks (1, 2, 2.5 or 5 × 10^k), at most 10 intervals.
  const double span_ms = (t1 - t0) * 1e3, step = nice_step(span_ms > 0 ? span_ms : 1, 10);
  for (double ms = 0; ms <= span_ms * (1 + 1e-9); ms += step) {
    const double x = px(t0 + ms / 1e3);
    s += "<line x1=\"" + fmt("%.1f", x) + "\" x2=\"" + fmt("%.1f", x) + "\" y1=\"" +
         fmt("%.1f", top) + "\" y2=\"" + fmt("%.1f", plot_bottom + 4) +
         "\" stroke=\"#ddd\"/>\n<text x=\"" + fmt("%.1f", x) + "\" y=\"" +
         fmt("%.1f", plot_bottom + 17) + "\" text-anchor=\"middle\">" + fmt("%g", ms) + "</text>\n";
  }
  s += "<text x=\"" + fmt("%.1f", left + plot_w / 2) + "\" y=\"" + fmt("%.1f", H - 10) +
       "\" text-anchor=\"middle\">time (ms)</text>\n";
  // Spans, with a tooltip each (name, µs, bytes and label of collectives).
  for (size_t i = 0; i < all.size(); ++i) {
    const Span& sp = all[i];
    const double x = px(sp.start), w = std::max(0.3, px(sp.end) - x);
    std::string tip = sp.name + ", " + fmt("%.1f", (sp.end - sp.start) * 1e6) + " µs";
    if (sp.kind == SpanKind::Collective)
      tip += ", " + std::to_string(sp.bytes) + " bytes" + (sp.async ? ", async" : "") +
             (sp.label.empty() ? "" : ", " + sp.label);
    s += "<rect x=\"" + fmt("%.2f", x) + "\" y=\"" + fmt("%.1f", row_y[lay.row_of[i]] + 2) +
         "\" width=\"" + fmt("%.2f", w) + "\" height=\"" + fmt("%.1f", row_h - 5) + "\" fill=\"" +
         colour(sp) + "\"><title>" + xml_escape(tip) + "</title></rect>\n";
    if (sp.kind == SpanKind::Phase && w >= 6.0 * static_cast<double>(sp.name.size()))
      s += "<text x=\"" + fmt("%.2f", x + w / 2) + "\" y=\"" +
           fmt("%.1f", row_y[lay.row_of[i]] + row_h - 6) + "\" text-anchor=\"middle\">" +
           xml_escape(sp.name) + "</text>\n";
  }
  return s + "</svg>\n";
}

void Timeline::write_svg(const std::string& path, const std::string& what) const {
  write_text_file(path, svg(), what);
}

}  // namespace tp
