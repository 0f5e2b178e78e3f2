// test_options.cpp — the command-line parser (serial).
#include <gtest/gtest.h>

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

// Parses `args` expecting a bad-input error whose message contains `needle`.
void expect_bad_input(std::vector<const char*> args, const std::string& needle) {
  Options o = make();
  try {
    parse(o, args);
    ADD_FAILURE() << "no error for " << args[0];
  } catch (const tp::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
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
  expect_bad_input({"--steps=99999999999999999999"}, "expected an integer");
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
  for (const auto& [arg, needle] : bad) {
    Options o = ranged();
    try {
      parse(o, {arg});
      ADD_FAILURE() << "no error for " << arg;
    } catch (const tp::Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Options, DashHIsHelp) {
  Options o = make();
  parse(o, {"-h"});
  EXPECT_TRUE(o.help_requested());
  expect_bad_input({"-x"}, "unexpected argument '-x'");
}
