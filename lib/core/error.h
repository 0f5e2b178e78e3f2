// error.h — tp::Error and the TP_CHECK macros.
//
// Two kinds of failure, told apart by the exit code they ask for:
//   - TP_CHECK_INPUT: bad input that every rank sees the same way (a flag, a shape, the rank count).
//     Exit code 2. The launcher (tp::run_program) lets rank 0 print the one-line message and every
//     rank exit 2 without hanging.
//   - kNonFinite (exit 3): training met a NaN/Inf that every rank sees the same way (the loss and the
//     global gradient norm are the same on every rank); handled like bad input.
//   - 128 + signal (130, 143): a stop after SIGINT/SIGTERM that every rank agreed on.
//   - TP_CHECK: anything else (a broken invariant, a failed system call, a rank-local problem).
//     Exit code 1. The launcher prints the message with the rank and aborts the whole job, so no
//     rank is left blocked in a collective.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tp {

/// The one exception type of the project. `exit_code()` is 2 for bad input, 3 for a non-finite
/// value met in training, 1 otherwise.
class Error : public std::runtime_error {
 public:
  /// The exit code of a NaN/Inf met in training (tools/tp_train.cpp's non-finite guard).
  static constexpr int kNonFinite = 3;
  explicit Error(const std::string& message, int exit_code = 1)
      : std::runtime_error(message), exit_code_(exit_code) {}
  /// Raised by this rank only, whatever the code: the launcher prints it with the rank and aborts
  /// the job with `exit_code` (a mismatched collective on a sub-group: core/checked_communicator.h).
  struct ThisRankOnly {};
  Error(const std::string& message, int exit_code, ThisRankOnly)
      : std::runtime_error(message), exit_code_(exit_code), this_rank_only_(true) {}
  /// 2: bad input (the same on every rank); 1: a failure.
  int exit_code() const { return exit_code_; }
  /// True for errors raised by TP_CHECK_INPUT.
  bool is_bad_input() const { return exit_code_ == 2; }
  /// True for errors every rank raises the same way (bad input, a non-finite loss or norm, a stop
  /// agreed after SIGINT/SIGTERM, whose code is 128 + the signal as a shell's): the
  /// launcher lets rank 0 print them and every rank exit with the code, instead of aborting.
  bool on_every_rank() const {
    if (this_rank_only_) return false;
    return exit_code_ == 2 || exit_code_ == kNonFinite || exit_code_ > 128;
  }

 private:
  int exit_code_;
  bool this_rank_only_ = false;
};

namespace detail {
/// Concatenates any streamable values: str_cat("hidden=", 500, " is odd").
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace tp

/// Throws tp::Error (exit code 1) with the concatenated message when `cond` is false.
#define TP_CHECK(cond, ...)                                                \
  do {                                                                     \
    if (!(cond)) throw ::tp::Error(::tp::detail::str_cat(__VA_ARGS__), 1); \
  } while (0)

/// Throws tp::Error (exit code 2, bad input) when `cond` is false. The message names the value and
/// the fix, e.g. "out=7 is not divisible by t=3; choose t in {1, 7}".
#define TP_CHECK_INPUT(cond, ...)                                          \
  do {                                                                     \
    if (!(cond)) throw ::tp::Error(::tp::detail::str_cat(__VA_ARGS__), 2); \
  } while (0)

namespace tp {
/// Bad-input check for tensor parallelism: `value` (the size called `what`, e.g. "out") must be
/// divisible by `t`. The message names the value, t, the valid choices of t and the fix:
///   "out=7 is not divisible by t=3 (the number of ranks); valid t: 1, 7"
void check_divisible(const std::string& what, long long value, int t);
}  // namespace tp
