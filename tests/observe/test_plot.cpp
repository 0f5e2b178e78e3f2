// test_plot.cpp — the SVG plots' round tick values, and the checked writes of output files
// (serial).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "core/output_file.h"
#include "observe/svg_plot.h"

namespace {

// True when v is 1, 2, 2.5 or 5 times a power of ten.
bool round_step(double v) {
  const double mag = std::pow(10.0, std::floor(std::log10(v) + 1e-12));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (std::fabs(v / mag - m) < 1e-9) return true;
  return false;
}

TEST(Plot, NiceStepIsOneTwoTwoHalfOrFive) {
  EXPECT_DOUBLE_EQ(tp::nice_step(49, 5), 10);   // 9.8 → 10
  EXPECT_DOUBLE_EQ(tp::nice_step(10, 5), 2);    // exactly 2
  EXPECT_DOUBLE_EQ(tp::nice_step(11, 5), 2.5);  // 2.2 → 2.5
  EXPECT_DOUBLE_EQ(tp::nice_step(3.3, 5), 1);   // 0.66 → 1
  EXPECT_DOUBLE_EQ(tp::nice_step(0.012, 5), 0.0025);
  for (double span = 1e-3; span < 1e6; span *= 1.37) {
    const double step = tp::nice_step(span, 5);
    EXPECT_TRUE(round_step(step)) << span << " → " << step;
    EXPECT_LE(span / step, 5 + 1e-9) << span;
    EXPECT_GT(span / step, 5 / 2.5 - 1e-9) << span;  // never needlessly coarse
  }
}

TEST(Plot, TicksCoverTheDataAndSitOnMultiples) {
  const auto t = tp::nice_ticks(2.31, 5.6);
  ASSERT_FALSE(t.empty());
  EXPECT_LE(t.front(), 2.31);
  EXPECT_GE(t.back(), 5.6);
  const double step = t[1] - t[0];
  for (double v : t) EXPECT_NEAR(v / step, std::round(v / step), 1e-9) << v;
  const auto z = tp::nice_ticks(-0.3, 0.3);
  bool has_zero = false;
  for (double v : z) has_zero = has_zero || v == 0.0;
  EXPECT_TRUE(has_zero);  // exactly 0, not 5.5e-17
  EXPECT_EQ(tp::nice_ticks(1, 50).front(), 0);
  EXPECT_EQ(tp::nice_ticks(1, 50).back(), 50);
}

TEST(Plot, TheSvgLabelsAreTheTicks) {
  const std::string svg =
      tp::svg_line_plot("t", "step", "loss", {{"a", {1, 2, 50}, {5.55, 3.1, 2.31}, "#000", false}});
  for (const char* label : {">0<", ">10<", ">50<", ">2<", ">6<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label << " missing";
  EXPECT_EQ(svg.find(">2.31<"), std::string::npos);  // the data's minimum is not a tick
}

}  // namespace

// Every write of an output file is checked (core/output_file.h): /dev/full fails at the write with
// ENOSPC named, a missing folder at the open; the message is headed by what the caller names.
TEST(OutputFile, AFailedWriteIsOneLineWithErrno) {
  try {
    tp::write_text_file("/dev/full", "<svg/>\n", "--plot /dev/full");
    ADD_FAILURE() << "writing /dev/full succeeded";
  } catch (const tp::Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--plot /dev/full: write failed: No space left on device (ENOSPC)");
    EXPECT_EQ(e.exit_code(), 1);
  }
  try {
    tp::OutputFile log("/dev/full", "--log-json /dev/full", tp::OutputFile::Mode::Append);
    log.write("{\"step\": 1}\n");
    ADD_FAILURE() << "appending to /dev/full succeeded";
  } catch (const tp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--log-json /dev/full: write failed"), std::string::npos)
        << e.what();
  }
  try {
    tp::write_file_atomic("/nonexistent-folder/config.json", "{}\n", "the export's config.json");
    ADD_FAILURE();
  } catch (const tp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("(ENOENT)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(tp::errno_text(EROFS), "Read-only file system (EROFS)");
  EXPECT_EQ(tp::errno_text(EIO), "Input/output error (EIO)");
}

TEST(OutputFile, WritesAppendsAndReplacesAtomically) {
  const std::string dir = ::testing::TempDir(), path = dir + "/tp_output_file_test.txt";
  tp::write_text_file(path, "one\n");
  {
    tp::OutputFile f(path, "test", tp::OutputFile::Mode::Append);
    f.write("two\n");
    f.close();
  }
  tp::write_file_atomic(path + ".json", "{}\n");
  std::ifstream in(path), js(path + ".json");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string json((std::istreambuf_iterator<char>(js)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "one\ntwo\n");
  EXPECT_EQ(json, "{}\n");
  EXPECT_NE(::access((path + ".json.tmp").c_str(), F_OK), 0);  // no temporary file left
  std::remove(path.c_str());
  std::remove((path + ".json").c_str());
}
