// fuzz_options.cpp — libFuzzer target for the command-line parser (make fuzz).
//
// The input is split at NUL and newline bytes into argv words and parsed by an Options declared
// like tp_train's (integers, reals with ranges, choices, flags). Bad words must end in a tp::Error
// with a one-line message; any other exception, a crash or a sanitizer report is a finding. After
// a successful parse every option is read back, and a range-checked value must be in its range.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words(1, "prog");
  std::string word;
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      words.push_back(word);
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(word);
  if (words.size() > 64) return 0;
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());

  tp::Options o("prog", "fuzzed");
  o.integer("layers", 2, "L").min(1);
  o.integer("seq", 64, "S").min(1).max(1 << 20);
  o.integer("kv-heads", 0, "GQA").non_negative();
  o.integer("dp", 1, "an int").min(1).fits_int();
  o.real("lr", 1e-3, "lr").positive().as_float();
  o.real("dropout", 0.0, "p").min(0).max(1, true).as_float();
  o.real("scale", 1.0, "any finite number");
  o.text("act", "gelu", "activation", {"gelu", "swiglu"});
  o.path("save", "", "a path");
  o.flag("sp", "a flag");
  try {
    o.parse(static_cast<int>(argv.size()), argv.data());
    if (o.get_int("layers") < 1 || o.get_int("seq") < 1 || o.get_int("seq") > (1 << 20) ||
        o.get_int("kv-heads") < 0 || !(o.get_real("lr") > 0) || o.get_real("dropout") < 0 ||
        o.get_real("dropout") >= 1 || !std::isfinite(o.get_real("scale")))
      __builtin_trap();  // a value outside its declared range got through
    // Stored types: an int that fits, floats that are neither 0 nor Inf nor out of range, a path
    // that is not empty when given.
    const float lr = static_cast<float>(o.get_real("lr")),
                p = static_cast<float>(o.get_real("dropout"));
    if (o.get_int32("dp") < 1 || !(lr > 0.0f) || !std::isfinite(lr) || !(p >= 0.0f && p < 1.0f))
      __builtin_trap();
    if (o.given("save") && o.get_text("save").empty()) __builtin_trap();
    const std::string& act = o.get_text("act");
    if (act != "gelu" && act != "swiglu") __builtin_trap();
    (void)o.get_flag("sp");
    (void)o.get_text("save");
    (void)o.help();
  } catch (const tp::Error& e) {
    const std::string msg = e.what();
    if (msg.find('\n') != std::string::npos) __builtin_trap();
  }
  return 0;
}
