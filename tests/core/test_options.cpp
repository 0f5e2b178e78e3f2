// test_options.cpp — the command-line parser (serial).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/options.h"

namespace {

using tp::Options;

Options make() {
  Options o("prog", "A test program.");
  o.integer("steps", 10, "steps to run").real("lr", 0.001, "learning rate").flag("step", "pause");
  o.text("act", "gelu", "activation", {"gelu", "swiglu"}).text("data", "", "a file");
  return o;
}

void parse(Options& o, std::vector<const char*> args) {
  args.insert(args.begin(), "prog");
  o.parse(static_cast<int>(args.size()), args.data());
}

// Parses `args` with the options `declare` makes, expecting a bad-input error (exit code 2) of
// one line whose message contains `needle`.
void expect_bad_input(std::vector<const char*> args, const std::string& needle,
                      Options (*declare)() = make) {
  Options o = declare();
  try {
    parse(o, args);
    ADD_FAILURE() << "no error for " << args[0];
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(Options, DefaultsWhenNothingIsGiven) {
  Options o = make();
  parse(o, {});
  EXPECT_EQ(o.get_int("steps"), 10);
  EXPECT_DOUBLE_EQ(o.get_real("lr"), 0.001);
  EXPECT_FALSE(o.get_flag("step"));
  EXPECT_EQ(o.get_text("act"), "gelu");
  EXPECT_FALSE(o.help_requested());
}

TEST(Options, BothValueFormsAndFlags) {
  Options o = make();
  parse(o, {"--steps=50", "--lr", "3e-4", "--step", "--act", "swiglu", "--data=a=b.txt"});
  EXPECT_EQ(o.get_int("steps"), 50);
  EXPECT_DOUBLE_EQ(o.get_real("lr"), 3e-4);
  EXPECT_TRUE(o.get_flag("step"));
  EXPECT_EQ(o.get_text("act"), "swiglu");
  EXPECT_EQ(o.get_text("data"), "a=b.txt");
  Options p = make();
  parse(p, {"--step=false", "--steps", "-3"});
  EXPECT_FALSE(p.get_flag("step"));
  EXPECT_EQ(p.get_int("steps"), -3);
}

// given(): set on the command line, even to the default value; a typo in the name is a bug.
TEST(Options, GivenTellsSetFromDefault) {
  Options o = make();
  parse(o, {"--steps=10", "--step=false"});
  EXPECT_TRUE(o.given("steps"));  // the default value, but given
  EXPECT_TRUE(o.given("step"));
  EXPECT_FALSE(o.given("lr"));
  EXPECT_FALSE(o.given("act"));
  try {
    (void)o.given("stpes");
    ADD_FAILURE() << "no error for an undeclared option";
  } catch (const tp::Error& e) {
    EXPECT_NE(e.exit_code(), 2) << e.what();
  }
}

TEST(Options, HelpListsEveryOptionWithItsDefault) {
  Options o = make();
  parse(o, {"--help"});
  EXPECT_TRUE(o.help_requested());
  const std::string h = o.help();
  for (const char* s : {"usage: prog", "A test program.", "--steps=N", "(default: 10)",
                        "--act=gelu|swiglu", "--step", "--help"})
    EXPECT_NE(h.find(s), std::string::npos) << s << " missing from:\n" << h;
}

TEST(Options, ErrorsNameTheProblem) {
  expect_bad_input({"--stpes=3"}, "unknown option --stpes");
  expect_bad_input({"--steps=3x"}, "--steps=3x: expected an integer");
  expect_bad_input({"--steps="}, "expected an integer");
  expect_bad_input({"--lr=fast"}, "--lr=fast: expected a number");
  expect_bad_input({"--steps"}, "--steps needs a value");
  expect_bad_input({"--act=relu"}, "expected one of gelu, swiglu");
  expect_bad_input({"--step=maybe"}, "expected true or false");
  expect_bad_input({"extra"}, "unexpected argument 'extra'");
  expect_bad_input({"--steps=99999999999999999999"},
                   "--steps=99999999999999999999: out of range of a 64-bit integer (at most "
                   "9223372036854775807)");
  expect_bad_input({"--steps=-99999999999999999999"}, "(at least -9223372036854775808)");
  expect_bad_input({"--lr=1e-400"}, "--lr=1e-400: underflows to 0 as a double");
  expect_bad_input({"--lr=1e400"}, "--lr=1e400: overflows a double");
}

TEST(Options, ProgrammingErrorsAreNotBadInput) {
  Options o = make();
  EXPECT_THROW(o.integer("steps", 1, "again"), tp::Error);
  try {
    (void)o.get_int("act");
    ADD_FAILURE();
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
  }
}

}  // namespace

// Parses each {argument, needle} alone into a fresh make() and expects a bad-input error (exit 2)
// whose message contains the needle.
template <typename Make>
void expect_each_refused(Make make, const std::vector<std::pair<const char*, const char*>>& bad) {
  for (const auto& [arg, needle] : bad) {
    Options o = make();
    try {
      parse(o, {arg});
      ADD_FAILURE() << "no error for " << arg;
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Options, RangesAreCheckedAndShown) {
  auto ranged = [] {
    Options o("prog", "Ranges.");
    o.real("lr", 1e-3, "learning rate").positive();
    o.real("dropout", 0.0, "dropout").min(0).max(1, true);
    o.integer("batch", 8, "batch").min(1);
    o.integer("warmup", 0, "warm-up").non_negative();
    return o;
  };
  Options ok = ranged();
  parse(ok, {"--lr=3e-4", "--dropout=0", "--batch=1", "--warmup=0"});
  EXPECT_DOUBLE_EQ(ok.get_real("lr"), 3e-4);
  const std::string h = ranged().help();
  for (const char* s : {"(default: 0.001; > 0)", "(default: 0; in [0, 1))", "(default: 8; >= 1)"})
    EXPECT_NE(h.find(s), std::string::npos) << s << " missing from:\n" << h;
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"--lr=-1", "--lr=-1: must be > 0"},      {"--lr=0", "must be > 0"},
      {"--lr=nan", "expected a finite number"}, {"--lr=inf", "expected a finite number"},
      {"--dropout=1", "must be in [0, 1)"},     {"--dropout=-0.1", "must be in [0, 1)"},
      {"--batch=0", "--batch=0: must be >= 1"}, {"--warmup=-5", "must be >= 0"}};
  expect_each_refused(ranged, bad);
}

TEST(Options, DashHIsHelp) {
  Options o = make();
  parse(o, {"-h"});
  EXPECT_TRUE(o.help_requested());
  expect_bad_input({"-x"}, "unexpected argument '-x'");
}

// The types values are stored in (issue 19): an int, a float, a path. Each refusal shows the value
// as typed; the accepted edges read back exactly.
Options typed() {
  Options o("prog", "Typed.");
  o.integer("dp", 1, "replicas").min(1).fits_int();
  o.integer("nodes", 0, "nodes").fits_int();
  o.integer("steps", 5, "steps").non_negative();
  o.real("lr", 1e-3, "learning rate").positive().as_float();
  o.real("weight-decay", 0.0, "decay").non_negative().as_float();
  o.real("dropout", 0.0, "dropout").min(0).max(1, true).as_float();
  o.real("scale", 1.0, "a double");
  o.path("save", "", "a file").path("plot", "build/loss.svg", "a file with a default");
  o.text("note", "", "any text, empty allowed");
  return o;
}

void expect_typed_bad(std::vector<const char*> args, const std::string& needle) {
  expect_bad_input(args, needle, typed);
}

TEST(Options, IntegersAreCheckedInTheTypeTheyAreStoredIn) {
  expect_typed_bad({"--dp", "4294967298"},
                   "--dp=4294967298: out of range of the 32-bit int this value is stored in");
  expect_typed_bad({"--dp=2147483648"}, "(-2147483648 to 2147483647)");
  expect_typed_bad({"--nodes=-2147483649"}, "--nodes=-2147483649: out of range of the 32-bit int");
  expect_typed_bad({"--dp=0"}, "--dp=0: must be >= 1");  // the declared range first
  Options o = typed();
  parse(o, {"--dp=2147483647", "--nodes=-2147483648", "--steps=4294967298"});
  EXPECT_EQ(o.get_int32("dp"), 2147483647);
  EXPECT_EQ(o.get_int32("nodes"), -2147483648LL);
  EXPECT_EQ(o.get_int("steps"), 4294967298LL);  // 64-bit: no limit but its own
  try {
    (void)o.get_int32("steps");  // not declared fits_int: a programming error
    ADD_FAILURE();
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
  }
  // Ranges of integers are shown as integers, not as 2.14748e+09.
  Options r("prog", "r");
  r.integer("seq", 64, "S").min(1).max(1 << 20);
  EXPECT_NE(r.help().find("in [1, 1048576]"), std::string::npos) << r.help();
}

TEST(Options, RealsStoredAsFloatMustNotBecome0OrInf) {
  expect_typed_bad({"--lr", "1e-50"}, "--lr=1e-50: is 0 as a 32-bit float");
  expect_typed_bad({"--weight-decay=1e39"}, "--weight-decay=1e39: is Inf as a 32-bit float");
  expect_typed_bad({"--dropout=0.99999999999"},
                   "--dropout=0.99999999999: must be in [0, 1), and it is 1 as the 32-bit float");
  expect_typed_bad({"--lr=1e-400"}, "--lr=1e-400: underflows to 0 as a double");
  Options o = typed();
  // A double keeps what a float cannot; a float's edges pass; 0 stays 0.
  parse(o, {"--scale=1e-50", "--lr=1e-40", "--weight-decay=3e38", "--dropout=0.9999999"});
  EXPECT_DOUBLE_EQ(o.get_real("scale"), 1e-50);
  EXPECT_GT(static_cast<float>(o.get_real("lr")), 0.0f);  // subnormal, not 0
  EXPECT_TRUE(std::isfinite(static_cast<float>(o.get_real("weight-decay"))));
  EXPECT_LT(static_cast<float>(o.get_real("dropout")), 1.0f);
  Options z = typed();
  parse(z, {"--weight-decay=0", "--dropout=0"});
  EXPECT_EQ(z.get_real("weight-decay"), 0.0);
}

TEST(Options, AnEmptyPathIsRefusedNotTakenAsNoFile) {
  for (const std::vector<const char*>& args :
       {std::vector<const char*>{"--save="}, {"--save", ""}, {"--plot="}}) {
    Options o = typed();
    try {
      parse(o, args);
      ADD_FAILURE() << "no error for " << args[0];
    } catch (const tp::Error& e) {
      const std::string flag = std::string(args[0]).substr(0, std::string(args[0]).find('='));
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(flag + "= is empty"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("leave " + flag + " out"), std::string::npos)
          << e.what();
    }
  }
  Options o = typed();
  parse(o, {"--note=", "--save=run.safetensors"});  // text may be empty; a path given is kept
  EXPECT_EQ(o.get_text("note"), "");
  EXPECT_EQ(o.get_text("save"), "run.safetensors");
  EXPECT_EQ(o.get_text("plot"), "build/loss.svg");  // a path's default is used when not given
}

// A text option declared non_empty() (tp_train's --resume) refuses `--resume=` the same way.
TEST(Options, ANonEmptyTextRefusesAnEmptyValue) {
  for (const std::vector<const char*>& args :
       {std::vector<const char*>{"--resume="}, {"--resume", ""}}) {
    Options o("prog", "Resume.");
    o.text("resume", "", "a mode").non_empty();
    try {
      parse(o, args);
      ADD_FAILURE() << "no error for " << args[0] << " " << (args.size() > 1 ? args[1] : "");
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find("--resume= is empty (an unset variable?); give a value"),
                std::string::npos)
          << e.what();
    }
  }
  Options o("prog", "Resume.");
  o.text("resume", "", "a mode").non_empty();
  parse(o, {"--resume=auto"});
  EXPECT_EQ(o.get_text("resume"), "auto");
}

// issue 39: a value that turns an option off (0) is accepted beside a range that starts at the
// smallest meaningful value; anything between is refused, and --help says both.
TEST(Options, ZeroMeansOffBesideTheSmallestMeaningfulValue) {
  auto budget = [] {
    Options o("prog", "Off values.");
    o.real("memory-budget", 0, "MiB per rank (0 = no budget)").min(1).zero_means_off();
    o.integer("keep", 3, "files kept").min(1).max(1000).fits_int();
    return o;
  };
  for (const char* ok : {"--memory-budget=0", "--memory-budget=1", "--memory-budget=4096"}) {
    Options o = budget();
    EXPECT_NO_THROW(parse(o, {ok})) << ok;
  }
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"--memory-budget=1e-300", "--memory-budget=1e-300: must be 0 or >= 1"},
      {"--memory-budget=0.5", "must be 0 or >= 1"},
      {"--memory-budget=-1", "must be 0 or >= 1"},
      {"--keep=4294967297", "--keep=4294967297: must be in [1, 1000]"},
      {"--keep=1001", "must be in [1, 1000]"}};
  expect_each_refused(budget, bad);
  const std::string h = budget().help();
  EXPECT_NE(h.find("(default: 0; 0 or >= 1)"), std::string::npos) << h;
  EXPECT_NE(h.find("(default: 3; in [1, 1000])"), std::string::npos) << h;
}
