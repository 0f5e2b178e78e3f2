// options.h — a small command-line parser: `--name=value`, `--name value`, boolean `--flag`,
// `--help` (or `-h`).
//
// Every option is declared with a type and a default before parsing, and parse() checks each value
// against its type and its range, so a bad number, an out-of-range value or an unknown flag is
// reported once, up front, as a bad-input tp::Error naming the flag ("unknown option --stpes; see
// --help", "--lr=-1: must be > 0"). Real values must be finite (nan and inf are refused).
//
// A value is checked in the type the program stores it in, so nothing is cut short after the check:
// integers are 64-bit unless declared with fits_int() (then they must fit an int: `--dp 4294967298`
// is refused, not run as dp 2), reals are doubles unless declared with as_float() (then a value
// that is 0 or Inf as a float, `--lr 1e-50`, is refused, and the range is checked on the float).
// A path option (path()) given with an empty value, `--save=` (often an unset shell variable), is
// refused instead of silently meaning "no file"; so is a text option declared non_empty()
// (`--resume=`). Every message shows the value as typed.
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

  /// A file or folder name: like text(), but an empty value given on the command line is refused
  /// ("--save= is empty; give a path, or omit --save to go without").
  Options& path(const std::string& name, const std::string& fallback, const std::string& help);

  /// The text option declared last refuses an empty value given on the command line, as path()
  /// does ("--resume= is empty (an unset variable?); give a value, or leave --resume out").
  Options& non_empty();

  /// The integer option declared last is stored in an int: values outside int's range are
  /// refused (read it with get_int32).
  Options& fits_int();
  /// The real option declared last is stored in a float: a value that is 0 or ±Inf as a float
  /// (while the typed value is not) is refused, and the range is checked on the float value too
  /// (`--dropout 0.99999999999` is 1 as a float).
  Options& as_float();

  /// Range of the option declared last (integer or real): the value must be >= `lo` (or > `lo`
  /// when `open` is true). The range is shown by --help and checked by parse().
  Options& min(double lo, bool open = false);
  /// The value must be <= `hi` (or < `hi` when `open` is true).
  Options& max(double hi, bool open = false);
  /// 0 is accepted besides the range of the option declared last: it turns the option off
  /// (`--memory-budget 0`), while a value between 0 and the smallest meaningful one
  /// (`--memory-budget 1e-300` MiB) is refused. --help shows "0 or >= 1".
  Options& zero_means_off();
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
  /// An option declared with fits_int().
  int get_int32(const std::string& name) const;
  double get_real(const std::string& name) const;
  const std::string& get_text(const std::string& name) const;
  /// True when the command line set `name` (even to its default value).
  bool given(const std::string& name) const;
  /// True when the program declared `name` (a function shared by programs with different tables).
  bool declared(const std::string& name) const { return options_.count(name) > 0; }

 private:
  enum class Type { Flag, Int, Real, Text };
  struct Option {
    Type type;
    std::string value;  // current value, as text (validated on assignment)
    std::string help;
    std::vector<std::string> choices;
    bool has_lo = false, lo_open = false, has_hi = false, hi_open = false;
    double lo = 0, hi = 0;
    bool given = false;      // set on the command line
    bool is_path = false;    // path(): an empty given value is refused
    bool non_empty = false;  // non_empty(): the same for a text option
    bool is_int32 = false;   // fits_int()
    bool is_float = false;   // as_float()
    bool zero_off = false;   // zero_means_off()
  };
  Option& last(const char* what);
  Option& last_of(const char* what, Type type);
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
