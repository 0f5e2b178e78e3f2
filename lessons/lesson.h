// lesson.h — what every lesson program shares: numbered steps, per-rank tables printed by rank 0,
// self-checks against a single-device reference, and the PASSED / FAILED ending.
//
// Display traffic (gathering each rank's numbers to rank 0 for printing) goes through a separate
// communicator, so the world communicator's CommLedger holds only the collectives the math needs;
// the lesson prints those in its "communication" column.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/comm_ledger.h"
#include "core/host.h"
#include "core/log.h"
#include "launcher.h"

namespace tp::lesson {

/// "9" for one value, "[1, 4]" for several (shortest round-trip-free %g formatting).
std::string fmt(const std::vector<float>& values);
std::string fmt(float value);
/// "[[1, 2, 3], [2, 4, 6]]": a row-major matrix with `cols` columns.
std::string fmt(const std::vector<float>& values, size_t cols);

/// A table printed with aligned columns (markdown-style pipes).
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

class Lesson {
 public:
  /// `ranks`: the rank counts this lesson accepts; the first is the one to suggest. With any
  /// other count every rank exits 2 after rank 0 prints the right mpirun command. Reads --step.
  Lesson(Context& ctx, const std::string& binary, const std::vector<int>& ranks);

  Communicator& world() { return ctx_.world; }
  const Options& options() const { return ctx_.options; }
  Device& device() { return ctx_.device; }
  /// The node of every world rank (Context::node_of_rank), for ProcessGrid.
  const std::vector<int>& node_of_rank() const { return ctx_.node_of_rank; }
  int rank() const { return ctx_.world.rank(); }
  int size() const { return ctx_.world.size(); }
  bool is_root() const { return rank() == 0; }

  /// Starts numbered step N+1: prints "Step N. heading" on rank 0. With --step, first waits for
  /// Enter (rank 0 reads stdin; the others wait for it).
  void step(const std::string& heading);
  /// Prints a line on rank 0.
  template <typename... Args>
  void say(Args&&... args) {
    log0(ctx_.world, std::forward<Args>(args)...);
  }

  /// Every rank's copy of `t` (same size on every rank), in rank order; filled on rank 0 only.
  std::vector<std::vector<float>> gather(const Tensor& t);
  /// One string per rank for `t`, formatted with fmt(); filled on rank 0 only.
  std::vector<std::string> gather_fmt(const Tensor& t);
  /// Every rank's `v`, exactly (sent as two floats of 24 bits each: |v| < 2^48); rank 0 only.
  std::vector<int64_t> gather_int64(int64_t v);
  /// Every rank's `v` (sent as a float: 24 bits of mantissa); filled on rank 0 only.
  std::vector<double> gather_double(double v);

  /// A table with the columns step | rank 0 | … | rank t−1 | communication, for report().
  Table rank_table() const;

  /// Gathers `value` from every rank, prints "  <step>:  rank 0: …   rank 1: …   communication: …"
  /// and adds the row [step, value on each rank, communication since `mark`] to `table` (rank 0).
  /// `step` names the row, so that every printed row says what it is.
  void report(Table& table, const std::string& step, const Tensor& value, size_t mark);

  /// Marks the world ledger: comm_since(mark) describes the collectives issued after it.
  size_t mark() const { return ctx_.world.ledger().size(); }
  /// "none", or e.g. "all-reduce of 2 floats (ring: 5.3 B sent per rank)" for the world
  /// collectives recorded since `mark`.
  std::string comm_since(size_t mark) const;

  // The checks come in two kinds, counted apart in the PASSED line:
  //  - a *quantity* is a number the lesson computes in parallel and compares with what one device
  //    computes (an output, a gradient, a loss, a partial sum against its host reference). `what`
  //    names it; checking the same name again (another rank's copy, or a second time) adds a
  //    comparison, not a quantity. check_ranks() checks one quantity once per rank.
  //  - a *fact* is anything else a lesson asserts: how many collectives ran, bytes against a
  //    formula, shard shapes, a source article's worked number, that bad input is refused.
  // finish() then prints e.g. "PASSED: 14 quantities checked against one device (38 per-rank
  // comparisons); 9 other facts checked".

  /// On rank 0: compares `got` with `want`, the single-device value of the quantity `what`
  /// (relative tolerance ‖got − want‖ / ‖want‖ ≤ rtol, or absolute ≤ rtol when want is all
  /// zeros), and records a failure naming `what` if they differ.
  void check(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
             double rtol = 1e-6);
  /// Gathers `t` from every rank and checks rank r's copy against want[r]: one quantity, one
  /// comparison per rank.
  void check_ranks(const std::string& what, const Tensor& t,
                   const std::vector<std::vector<float>>& want, double rtol = 1e-6);
  /// Like check(), for a fact that is not a comparison with one device (see above).
  void check_fact(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want, double rtol = 1e-6);
  /// A fact that is one number: `got` against `want`, |got − want| ≤ rtol·|want| (≤ rtol when want
  /// is 0), compared in double.
  void check_value(const std::string& what, double got, double want, double rtol = 1e-6);
  /// A fact that is a yes/no statement (a comparison, an inequality, a message naming a value):
  /// records a failure naming `what` when it does not hold. Not a number cast to float.
  void check_true(const std::string& what, bool holds);
  /// check_true whose failure also says `why` (the values the statement was about, e.g.
  /// "e = 3e-3 > γ = 2e-3").
  void check_true(const std::string& what, bool holds, const std::string& why);
  /// Like check_ranks(), for a fact: rank r's copy of `t` against want[r].
  void check_fact_ranks(const std::string& what, const Tensor& t,
                        const std::vector<std::vector<float>>& want, double rtol = 1e-6);
  /// On rank 0: distinct quantities checked, the comparisons made of them, distinct facts checked.
  int quantities() const { return static_cast<int>(quantities_.size()); }
  int comparisons() const { return comparisons_; }
  int facts() const { return static_cast<int>(facts_.size()); }

  /// Prints "PASSED: n quantities checked against one device (m per-rank comparisons); k other
  /// facts checked" and returns 0, or lists what differed, prints "FAILED: …" and returns 1. The
  /// same value on every rank.
  int finish();

 private:
  Context& ctx_;
  std::unique_ptr<Communicator> display_;
  bool pause_;
  int step_ = 0;
  std::set<std::string> quantities_, facts_;
  int comparisons_ = 0, fact_checks_ = 0;
  std::vector<std::string> failures_;

  // One comparison of `got` with `want`; records a failure naming `what` if they differ.
  void compare(const std::string& what, const std::vector<float>& got,
               const std::vector<float>& want, double rtol);
};

/// One step's collectives grouped by (op, elements, CommLedger label), in order of first
/// appearance: collective | elements | calls | where (CommLedger label) | sent per rank.
Table ledger_table(const std::vector<CommRecord>& recs);

/// "mpirun -np 3 build/bin/<binary> (also works with -np 1, 2, 4)": how to run a lesson that accepts
/// the rank counts `ranks` (the first is the one to suggest).
std::string how_to_run(const std::string& binary, const std::vector<int>& ranks);

/// Where a lesson writes a picture by default: `build/<file>` when the folder it is run from has a
/// `build/` folder (the repository root), else `<file>` in that folder (e.g. run from build/bin).
std::string default_output(const std::string& file);

/// The whole of a lesson's main(): declares --step, starts the ranks (tp::run_program), checks the
/// rank count against `ranks`, prints the title and "t = N ranks: communicator, device", runs `body`
/// and ends with Lesson::finish(). `binary` names the program in messages ("lesson_02_...").
/// `extra_options`, when given, declares the lesson's own flags (read them with L.options()).
int run(int argc, char** argv, const std::string& binary, const std::string& title,
        const std::vector<int>& ranks, const std::function<void(Lesson&)>& body,
        const std::function<void(Options&)>& extra_options = {});

/// {f(0), f(1), …, f(t − 1)}: what each rank should hold, for check_ranks.
template <typename F>
std::vector<std::vector<float>> per_rank(int t, F f) {
  std::vector<std::vector<float>> v;
  for (int i = 0; i < t; ++i) v.push_back(f(i));
  return v;
}

}  // namespace tp::lesson
