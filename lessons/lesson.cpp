#include "lesson.h"

#include <sys/stat.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "core/format.h"

namespace tp::lesson {

std::string default_output(const std::string& file) {
  struct stat st {};
  return stat("build", &st) == 0 && S_ISDIR(st.st_mode) ? "build/" + file : file;
}

std::string fmt(float value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", static_cast<double>(value));
  return buf;
}

std::string fmt(const std::vector<float>& values) {
  if (values.size() == 1) return fmt(values[0]);
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + fmt(values[i]);
  return s + "]";
}

std::string fmt(const std::vector<float>& values, size_t cols) {
  if (cols == 0 || values.size() <= cols) return fmt(values);
  std::string s = "[";
  for (size_t r = 0; r * cols < values.size(); ++r)
    s += (r ? ", " : "") +
         fmt(std::vector<float>(values.begin() + r * cols,
                                values.begin() + std::min(values.size(), (r + 1) * cols)));
  return s + "]";
}

std::string Table::str() const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      // Count code points, not bytes, so "Xᵀ" aligns.
      size_t n = 0;
      for (unsigned char ch : row[i]) n += (ch & 0xC0) != 0x80;
      width[i] = std::max(width[i], n);
    }
  };
  measure(header_);
  for (const auto& r : rows_) measure(r);
  auto line = [&](const std::vector<std::string>& row) {
    std::string s = "|";
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      size_t n = 0;
      for (unsigned char ch : cell) n += (ch & 0xC0) != 0x80;
      s += " " + cell + std::string(width[i] - n, ' ') + " |";
    }
    return s + "\n";
  };
  std::string out = line(header_);
  out += "|";
  for (size_t w : width) out += std::string(w + 2, '-') + "|";
  out += "\n";
  for (const auto& r : rows_) out += line(r);
  return out;
}

Table ledger_table(const std::vector<CommRecord>& recs) {
  struct Row {
    std::string op, label;
    int64_t elements = 0;
    int calls = 0;
    double wire = 0;
  };
  std::vector<Row> rows;
  for (const CommRecord& r : recs) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& x) {
      return x.op == r.op && x.elements == r.elements && x.label == r.label;
    });
    if (it == rows.end()) {
      rows.push_back({r.op, r.label, r.elements, 0, 0});
      it = rows.end() - 1;
    }
    ++it->calls;
    it->wire += r.wire_bytes;
  }
  Table table({"collective", "elements", "calls", "where (CommLedger label)", "sent per rank"});
  for (const Row& r : rows) {
    std::string op = r.op;
    std::replace(op.begin(), op.end(), '_', '-');
    table.add({op, std::to_string(r.elements), std::to_string(r.calls), r.label, kib_mib(r.wire)});
  }
  return table;
}

std::string how_to_run(const std::string& binary, const std::vector<int>& ranks) {
  std::string others;
  for (size_t i = 1; i < ranks.size(); ++i)
    others += (i > 1 ? ", " : "") + std::to_string(ranks[i]);
  return "mpirun -np " + std::to_string(ranks.at(0)) + " build/bin/" + binary +
         (others.empty() ? "" : " (also works with -np " + others + ")");
}

Lesson::Lesson(Context& ctx, const std::string& binary, const std::vector<int>& ranks)
    : ctx_(ctx), pause_(ctx.options.get_flag("step")) {
  const int t = ctx.world.size();
  TP_CHECK_INPUT(std::find(ranks.begin(), ranks.end(), t) != ranks.end(), binary, " runs on ",
                 ranks.at(0), " ranks, not ", t, ": ", how_to_run(binary, ranks));
  display_ = ctx.world.split(0, ctx.world.rank());
}

void Lesson::step(const std::string& heading) {
  if (pause_ && step_ > 0) {
    if (is_root()) {
      std::cout << "  [--step: press Enter for step " << step_ + 1 << "]" << std::flush;
      std::string ignored;
      std::getline(std::cin, ignored);
    }
    display_->barrier();
  }
  ++step_;
  say("\nStep ", step_, ". ", heading);
}

std::vector<std::vector<float>> Lesson::gather(const Tensor& t) {
  const int64_t n = t.numel();
  Tensor all(t.device(), Shape{size(), n});
  display_->all_gather(t.reshape(Shape{n}), all);
  std::vector<std::vector<float>> out;
  if (!is_root()) return out;
  const std::vector<float> flat = all.to_host();
  for (int r = 0; r < size(); ++r)
    out.emplace_back(flat.begin() + r * n, flat.begin() + (r + 1) * n);
  return out;
}

std::vector<std::string> Lesson::gather_fmt(const Tensor& t) {
  std::vector<std::string> out;
  for (const auto& v : gather(t))
    out.push_back(fmt(v, t.rows() > 1 ? static_cast<size_t>(t.cols()) : 0));
  return out;
}

Table Lesson::rank_table() const {
  std::vector<std::string> header = {"step"};
  for (int i = 0; i < size(); ++i) header.push_back("rank " + std::to_string(i));
  header.push_back("communication");
  return Table(header);
}

void Lesson::report(Table& table, const std::string& step, const Tensor& value, size_t mark) {
  std::vector<std::string> cells = gather_fmt(value);
  if (!is_root()) return;
  std::string line = "  " + step + ": ";
  for (size_t i = 0; i < cells.size(); ++i)
    line += " rank " + std::to_string(i) + ": " + cells[i] + "  ";
  const std::string comm = comm_since(mark);
  say(line, " communication: ", comm);
  cells.insert(cells.begin(), step);
  cells.push_back(comm);
  table.add(cells);
}

std::string Lesson::comm_since(size_t mark) const {
  const auto& recs = ctx_.world.ledger().records();
  if (mark >= recs.size()) return "none";
  std::string s;
  for (size_t i = mark; i < recs.size(); ++i) {
    const CommRecord& r = recs[i];
    std::string op = r.op;
    std::replace(op.begin(), op.end(), '_', '-');
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s of %lld float%s (ring: %.3g B sent per rank)", op.c_str(),
                  static_cast<long long>(r.elements), r.elements == 1 ? "" : "s", r.wire_bytes);
    s += (s.empty() ? "" : "; ") + std::string(buf);
  }
  return s;
}

std::vector<int64_t> Lesson::gather_int64(int64_t v) {
  const float hi = static_cast<float>(v >> 24), lo = static_cast<float>(v & 0xFFFFFF);
  std::vector<int64_t> out;
  for (const auto& r : gather(Tensor::from_host(device(), Shape{2}, {hi, lo})))
    out.push_back((static_cast<int64_t>(r[0]) << 24) + static_cast<int64_t>(r[1]));
  return out;
}

std::vector<double> Lesson::gather_double(double v) {
  std::vector<double> out;
  for (const auto& r : gather(Tensor::from_host(device(), Shape{1}, {static_cast<float>(v)})))
    out.push_back(r[0]);
  return out;
}

void Lesson::compare(const std::string& what, const std::vector<float>& got,
                     const std::vector<float>& want, double rtol) {
  if (got.size() != want.size()) {
    failures_.push_back(what + ": got " + std::to_string(got.size()) + " values, expected " +
                        std::to_string(want.size()));
    return;
  }
  const double err = rel_error(got, want);
  if (!(err <= rtol)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " (relative error %.3g > %.3g)", err, rtol);
    failures_.push_back(what + ": got " + fmt(got) + ", expected " + fmt(want) + buf);
  }
}

void Lesson::check(const std::string& what, const std::vector<float>& got,
                   const std::vector<float>& want, double rtol) {
  if (!is_root()) return;
  quantities_.insert(what);
  ++comparisons_;
  compare(what, got, want, rtol);
}

void Lesson::check_ranks(const std::string& what, const Tensor& t,
                         const std::vector<std::vector<float>>& want, double rtol) {
  const auto got = gather(t);
  if (!is_root()) return;
  TP_CHECK(want.size() == got.size(), "check_ranks: expected values for ", got.size(), " ranks");
  quantities_.insert(what);
  for (size_t r = 0; r < got.size(); ++r) {
    ++comparisons_;
    compare(what + " on rank " + std::to_string(r), got[r], want[r], rtol);
  }
}

void Lesson::check_fact(const std::string& what, const std::vector<float>& got,
                        const std::vector<float>& want, double rtol) {
  if (!is_root()) return;
  facts_.insert(what);
  ++fact_checks_;
  compare(what, got, want, rtol);
}

void Lesson::check_value(const std::string& what, double got, double want, double rtol) {
  if (!is_root()) return;
  facts_.insert(what);
  ++fact_checks_;
  const double err = want == 0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);
  if (!(err <= rtol)) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ": got %.9g, expected %.9g (relative error %.3g > %.3g)", got,
                  want, err, rtol);
    failures_.push_back(what + buf);
  }
}

void Lesson::check_true(const std::string& what, bool holds) { check_true(what, holds, ""); }

void Lesson::check_true(const std::string& what, bool holds, const std::string& why) {
  if (!is_root()) return;
  facts_.insert(what);
  ++fact_checks_;
  if (!holds) failures_.push_back(what + ": does not hold" + (why.empty() ? "" : " (" + why + ")"));
}

void Lesson::check_fact_ranks(const std::string& what, const Tensor& t,
                              const std::vector<std::vector<float>>& want, double rtol) {
  const auto got = gather(t);
  if (!is_root()) return;
  TP_CHECK(want.size() == got.size(), "check_fact_ranks: expected values for ", got.size(),
           " ranks");
  facts_.insert(what);
  for (size_t r = 0; r < got.size(); ++r) {
    ++fact_checks_;
    compare(what + " on rank " + std::to_string(r), got[r], want[r], rtol);
  }
}

namespace {
std::string count(int n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}
}  // namespace

int Lesson::finish() {
  Tensor failed = Tensor::from_host(device(), Shape{1}, {static_cast<float>(failures_.size())});
  display_->broadcast(failed, 0);
  const bool ok = failed.to_host()[0] == 0.0f;
  if (is_root()) {
    // "14 quantities checked against one device (38 per-rank comparisons); 9 other facts checked"
    std::string what =
        count(quantities(), "quantity", "quantities") + " checked against one device";
    if (comparisons_ > quantities())
      what += " (" + std::to_string(comparisons_) + " per-rank comparisons)";
    if (facts() > 0) what += "; " + count(facts(), "other fact", "other facts") + " checked";
    if (ok) {
      say("\nPASSED: ", what);
    } else {
      for (const auto& f : failures_) say("  differs: ", f);
      say("\nFAILED: ", failures_.size(), " of ", comparisons_ + fact_checks_,
          " comparisons differ (", what, ")");
    }
  }
  return ok ? 0 : 1;
}

int run(int argc, char** argv, const std::string& binary, const std::string& title,
        const std::vector<int>& ranks, const std::function<void(Lesson&)>& body,
        const std::function<void(Options&)>& extra_options) {
  // The help names the rank count (scripts/check-lessons.py compares it with lessons/lessons.txt).
  Options opts(binary, title + ".\nRuns on " + std::to_string(ranks.at(0)) +
                           " ranks: " + how_to_run(binary, ranks) + ".");
  opts.flag("step", "pause for Enter between steps");
  if (extra_options) extra_options(opts);
  return run_program(argc, argv, opts, [&](Context& ctx) {
    Lesson lesson(ctx, binary, ranks);
    const int t = ctx.world.size();
    lesson.say(title, "\n  t = ", t, " rank", t == 1 ? "" : "s", ": ", ctx.world.name(), ", ",
               ctx.device.name());
    body(lesson);
    return lesson.finish();
  });
}

}  // namespace tp::lesson
