#include "core/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace tp {

namespace {
enum class Parsed { Ok, Malformed, TooLarge, TooSmall };

// A whole decimal integer in int64's range.
Parsed parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return Parsed::Malformed;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0') return Parsed::Malformed;
  if (errno == ERANGE) return v > 0 ? Parsed::TooLarge : Parsed::TooSmall;
  out = v;
  return Parsed::Ok;
}

// A whole number in double's range: TooLarge when it overflows to ±Inf, TooSmall when a non-zero
// value underflows to 0 (a subnormal result is kept).
Parsed parse_real(const std::string& s, double& out) {
  if (s.empty()) return Parsed::Malformed;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return Parsed::Malformed;
  if (errno == ERANGE && std::isinf(v)) return Parsed::TooLarge;
  if (errno == ERANGE && v == 0.0) return Parsed::TooSmall;
  out = v;
  return Parsed::Ok;
}

std::string shortest(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool parse_bool(const std::string& s, bool& out) {
  if (s == "true" || s == "1" || s == "yes") return out = true, true;
  if (s == "false" || s == "0" || s == "no") return out = false, true;
  return false;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}
}  // namespace

Options::Options(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

Options& Options::declare(const std::string& name, Type type, std::string value,
                          const std::string& help, const std::vector<std::string>& choices) {
  TP_CHECK(!name.empty() && name != "help", "invalid option name '", name, "'");
  TP_CHECK(options_.count(name) == 0, "option --", name, " declared twice");
  options_[name] = Option{type, std::move(value), help, choices};
  order_.push_back(name);
  return *this;
}

Options& Options::flag(const std::string& name, const std::string& help) {
  return declare(name, Type::Flag, "false", help);
}

Options& Options::integer(const std::string& name, int64_t fallback, const std::string& help) {
  return declare(name, Type::Int, std::to_string(fallback), help);
}

Options& Options::real(const std::string& name, double fallback, const std::string& help) {
  std::ostringstream os;
  os << fallback;
  return declare(name, Type::Real, os.str(), help);
}

Options& Options::text(const std::string& name, const std::string& fallback,
                       const std::string& help, const std::vector<std::string>& choices) {
  return declare(name, Type::Text, fallback, help, choices);
}

Options::Option& Options::last(const char* what) {
  TP_CHECK(!order_.empty(), "Options::", what, " before any option was declared");
  Option& o = options_.at(order_.back());
  TP_CHECK(o.type == Type::Int || o.type == Type::Real, "Options::", what, " on --", order_.back(),
           ", which is not a number");
  return o;
}

Options::Option& Options::last_of(const char* what, Type type) {
  TP_CHECK(!order_.empty(), "Options::", what, " before any option was declared");
  Option& o = options_.at(order_.back());
  TP_CHECK(o.type == type, "Options::", what, " on --", order_.back(),
           ", which is of another type");
  return o;
}

Options& Options::path(const std::string& name, const std::string& fallback,
                       const std::string& help) {
  declare(name, Type::Text, fallback, help);
  options_.at(name).is_path = true;
  return *this;
}

Options& Options::non_empty() {
  last_of("non_empty", Type::Text).non_empty = true;
  return *this;
}

Options& Options::fits_int() {
  Option& o = last_of("fits_int", Type::Int);
  int64_t v = 0;
  parse_int(o.value, v);
  TP_CHECK(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(),
           "Options::fits_int: the default of --", order_.back(), " does not fit an int");
  o.is_int32 = true;
  return *this;
}

Options& Options::as_float() {
  last_of("as_float", Type::Real).is_float = true;
  return *this;
}

Options& Options::min(double lo, bool open) {
  Option& o = last("min");
  o.has_lo = true;
  o.lo = lo;
  o.lo_open = open;
  return *this;
}

Options& Options::max(double hi, bool open) {
  Option& o = last("max");
  o.has_hi = true;
  o.hi = hi;
  o.hi_open = open;
  return *this;
}

Options& Options::zero_means_off() {
  last("zero_means_off").zero_off = true;
  return *this;
}

// "> 0", ">= 1", "in [0, 1)", "0 or >= 1", or "" when unbounded.
std::string Options::range_text(const Option& o) {
  if (o.zero_off) {
    Option bounds = o;
    bounds.zero_off = false;
    return "0 or " + range_text(bounds);
  }
  auto num = [&o](double v) {
    return o.type == Type::Int ? std::to_string(static_cast<long long>(v)) : shortest(v);
  };
  if (o.has_lo && o.has_hi)
    return "in " + std::string(o.lo_open ? "(" : "[") + num(o.lo) + ", " + num(o.hi) +
           (o.hi_open ? ")" : "]");
  if (o.has_lo) return (o.lo_open ? "> " : ">= ") + num(o.lo);
  if (o.has_hi) return (o.hi_open ? "< " : "<= ") + num(o.hi);
  return "";
}

void Options::assign(const std::string& name, Option& opt, const std::string& value) {
  const std::string typed = "--" + name + "=" + value;
  int64_t i = 0;
  double d = 0;
  bool b = false;
  switch (opt.type) {
    case Type::Flag:
      TP_CHECK_INPUT(parse_bool(value, b), typed, ": expected true or false (or give --", name,
                     " alone)");
      opt.value = b ? "true" : "false";
      return;
    case Type::Int: {
      const Parsed p = parse_int(value, i);
      TP_CHECK_INPUT(p != Parsed::Malformed, typed, ": expected an integer");
      TP_CHECK_INPUT(p == Parsed::Ok, typed, ": out of range of a 64-bit integer (",
                     p == Parsed::TooLarge ? "at most " : "at least ",
                     p == Parsed::TooLarge ? std::numeric_limits<int64_t>::max()
                                           : std::numeric_limits<int64_t>::min(),
                     ")");
      break;
    }
    case Type::Real: {
      const Parsed p = parse_real(value, d);
      TP_CHECK_INPUT(p != Parsed::Malformed, typed, ": expected a number");
      TP_CHECK_INPUT(p != Parsed::TooLarge, typed,
                     ": overflows a double (the largest is about 1.8e308)");
      TP_CHECK_INPUT(p != Parsed::TooSmall, typed,
                     ": underflows to 0 as a double (the smallest positive is about 4.9e-324)");
      TP_CHECK_INPUT(std::isfinite(d), typed, ": expected a finite number");
      break;
    }
    case Type::Text:
      TP_CHECK_INPUT(!(opt.is_path || opt.non_empty) || !value.empty(), "--", name,
                     "= is empty (an unset variable?); give ", opt.is_path ? "a path" : "a value",
                     ", or leave --", name, " out");
      if (!opt.choices.empty()) {
        bool ok = false;
        for (const auto& c : opt.choices) ok = ok || c == value;
        TP_CHECK_INPUT(ok, typed, ": expected one of ", join(opt.choices, ", "));
      }
      break;
  }
  if (opt.type == Type::Int || opt.type == Type::Real) {
    auto in_range = [&opt](double v) {
      if (opt.zero_off && v == 0.0) return true;
      const bool low_ok = !opt.has_lo || (opt.lo_open ? v > opt.lo : v >= opt.lo);
      const bool high_ok = !opt.has_hi || (opt.hi_open ? v < opt.hi : v <= opt.hi);
      return low_ok && high_ok;
    };
    const double v = opt.type == Type::Int ? static_cast<double>(i) : d;
    // Stored as a float: the value the program will see is (float) d (Inf beyond float's range,
    // where the conversion itself would be undefined).
    const double stored = !opt.is_float ? v
                          : std::fabs(d) > std::numeric_limits<float>::max()
                              ? std::copysign(HUGE_VAL, d)
                              : static_cast<double>(static_cast<float>(d));
    if (opt.is_float) {
      TP_CHECK_INPUT(d == 0.0 || stored != 0.0, typed,
                     ": is 0 as a 32-bit float, which this value is stored in (the smallest "
                     "positive float is about 1.4e-45)");
      TP_CHECK_INPUT(std::isfinite(stored), typed,
                     ": is Inf as a 32-bit float, which this value is stored in (the largest "
                     "float is about 3.4e38)");
    }
    TP_CHECK_INPUT(in_range(v), typed, ": must be ", range_text(opt));
    TP_CHECK_INPUT(in_range(stored), typed, ": must be ", range_text(opt), ", and it is ",
                   shortest(stored), " as the 32-bit float it is stored in");
    if (opt.is_int32)
      TP_CHECK_INPUT(i >= std::numeric_limits<int>::min() && i <= std::numeric_limits<int>::max(),
                     typed, ": out of range of the 32-bit int this value is stored in (",
                     std::numeric_limits<int>::min(), " to ", std::numeric_limits<int>::max(), ")");
  }
  opt.value = value;
}

void Options::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h") {
      help_ = true;
      continue;
    }
    TP_CHECK_INPUT(arg.size() > 2 && arg.compare(0, 2, "--") == 0, "unexpected argument '", arg,
                   "'; options look like --name=value (see --help)");
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "help") {
      help_ = true;
      continue;
    }
    auto it = options_.find(name);
    TP_CHECK_INPUT(it != options_.end(), "unknown option --", name, " (", program_, " accepts: --",
                   join(order_, ", --"), "; see --help)");
    Option& opt = it->second;
    if (!has_value) {
      if (opt.type == Type::Flag) {
        value = "true";
      } else {
        TP_CHECK_INPUT(i + 1 < argc, "--", name, " needs a value (--", name, "=VALUE)");
        value = argv[++i];
      }
    }
    assign(name, opt, value);
    opt.given = true;
  }
}

bool Options::given(const std::string& name) const {
  const auto it = options_.find(name);
  TP_CHECK(it != options_.end(), program_, ": option --", name, " was never declared");
  return it->second.given;
}

std::string Options::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const auto& name : order_) {
    const Option& o = options_.at(name);
    std::string left = "  --" + name;
    if (o.type == Type::Int) left += "=N";
    if (o.type == Type::Real) left += "=X";
    if (o.type == Type::Text) left += o.choices.empty() ? "=S" : "=" + join(o.choices, "|");
    if (left.size() < 26) left.resize(26, ' ');
    os << left << " " << o.help;
    if (o.type != Type::Flag) {
      os << " (default: " << (o.value.empty() ? "none" : o.value);
      const std::string range = range_text(o);
      if (!range.empty()) os << "; " << range;
      os << ")";
    }
    os << "\n";
  }
  os << "  -h, --help               print this text and exit\n";
  return os.str();
}

const Options::Option& Options::find(const std::string& name, Type type) const {
  auto it = options_.find(name);
  TP_CHECK(it != options_.end(), "option --", name, " was never declared");
  TP_CHECK(it->second.type == type, "option --", name, " read with the wrong type");
  return it->second;
}

bool Options::get_flag(const std::string& name) const {
  return find(name, Type::Flag).value == "true";
}

int Options::get_int32(const std::string& name) const {
  const Option& o = find(name, Type::Int);
  TP_CHECK(o.is_int32, "option --", name, " read with get_int32 but not declared with fits_int()");
  return static_cast<int>(get_int(name));
}

int64_t Options::get_int(const std::string& name) const {
  int64_t v = 0;
  parse_int(find(name, Type::Int).value, v);
  return v;
}

double Options::get_real(const std::string& name) const {
  double v = 0;
  parse_real(find(name, Type::Real).value, v);
  return v;
}

const std::string& Options::get_text(const std::string& name) const {
  return find(name, Type::Text).value;
}

}  // namespace tp
