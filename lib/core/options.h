// options.h — a small command-line parser: `--name=value`, `--name value`, boolean `--flag`,
// `--help` (or `-h`).
//
// Every option is declared with a type and a default before parsing, and parse() checks each value
// against its type and its range, so a bad number, an out-of-range value or an unknown flag is
// reported once, up front, as a bad-input tp::Error naming the flag ("unknown option --stpes; see
// --help", "--lr=-1: must be > 0"). Real values must be finite (nan and inf are refused).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tp {

class Options {
 public:
  /// `program` and `summary` head the --help text.
  Options(std::string program, std::string summary);

  /// A boolean flag, false unless given (`--step`). `--step=true|false|1|0` is accepted too.
  Options& flag(const std::string& name, const std::string& help);
  /// An integer option.
  Options& integer(const std::string& name, int64_t fallback, const std::string& help);
  /// A floating-point option.
  Options& real(const std::string& name, double fallback, const std::string& help);
  /// A string option; with non-empty `choices`, the value must be one of them.
  Options& text(const std::string& name, const std::string& fallback, const std::string& help,
                const std::vector<std::string>& choices = {});

  /// Range of the option declared last (integer or real): the value must be >= `lo` (or > `lo`
  /// when `open` is true). The range is shown by --help and checked by parse().
  Options& min(double lo, bool open = false);
  /// The value must be <= `hi` (or < `hi` when `open` is true).
  Options& max(double hi, bool open = false);
  /// Shorthands: > 0, and >= 0.
  Options& positive() { return min(0, true); }
  Options& non_negative() { return min(0); }

  /// Parses argv[1..argc). Throws a bad-input tp::Error on an unknown option, a missing or
  /// malformed value, or a positional argument.
  void parse(int argc, const char* const* argv);

  bool help_requested() const { return help_; }
  /// The --help text: usage line, summary and one line per option with its default.
  std::string help() const;

  bool get_flag(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_real(const std::string& name) const;
  const std::string& get_text(const std::string& name) const;
  /// True when the command line set `name` (even to its default value).
  bool given(const std::string& name) const;

 private:
  enum class Type { Flag, Int, Real, Text };
  struct Option {
    Type type;
    std::string value;  // current value, as text (validated on assignment)
    std::string help;
    std::vector<std::string> choices;
    bool has_lo = false, lo_open = false, has_hi = false, hi_open = false;
    double lo = 0, hi = 0;
    bool given = false;  // set on the command line
  };
  Option& last(const char* what);
  static std::string range_text(const Option& o);
  Options& declare(const std::string& name, Type type, std::string value, const std::string& help,
                   const std::vector<std::string>& choices = {});
  void assign(const std::string& name, Option& opt, const std::string& value);
  const Option& find(const std::string& name, Type type) const;

  std::string program_, summary_;
  std::map<std::string, Option> options_;
  std::vector<std::string> order_;
  bool help_ = false;
};

}  // namespace tp
