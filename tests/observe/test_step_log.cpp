// test_step_log.cpp — a resumed run's --log-json cut back to its checkpoint (observe/step_log.h)
// (serial).
#include "observe/step_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& text) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path path =
      fs::path(::testing::TempDir()) / (std::string("tp_step_log_") + info->name() + ".jsonl");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path.string();
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(StepLog, StepOfALine) {
  EXPECT_EQ(tp::step_of_log_line(R"({"step": 12, "loss": 3.5})"), 12);
  EXPECT_EQ(tp::step_of_log_line(R"({"step":7})"), 7);
  EXPECT_EQ(tp::step_of_log_line(R"({"loss": 3.5})"), -1);
  EXPECT_EQ(tp::step_of_log_line(R"({"step": "x"})"), -1);
  EXPECT_EQ(tp::step_of_log_line(R"({"step": -3})"), -1);
}

// The steps past the checkpoint go, and the torn last line; lines without a step and the steps up
// to the checkpoint stay, in their order.
TEST(StepLog, CutsThePastStepsAndATornLastLine) {
  const std::string path = temp_file(
      "{\"step\": 1}\n{\"note\": 1}\n{\"step\": 2}\n{\"step\": 3}\n{\"step\": 4}\n{\"step\": 5, "
      "\"lo");
  const tp::LogCut cut = tp::cut_step_log(path, 2, "--log-json x");
  EXPECT_EQ(cut.kept, 3);
  EXPECT_EQ(cut.cut, 3);
  EXPECT_EQ(read(path), "{\"step\": 1}\n{\"note\": 1}\n{\"step\": 2}\n");
  EXPECT_EQ(tp::cut_step_log(path, 2, "--log-json x").cut, 0);  // once is enough
}

TEST(StepLog, NothingToCutLeavesTheFileAsItWas) {
  const std::string text = "{\"step\": 1}\n{\"step\": 2}\n";
  const std::string path = temp_file(text);
  const auto before = fs::last_write_time(path);
  EXPECT_EQ(tp::cut_step_log(path, 5, "--log-json x").cut, 0);
  EXPECT_EQ(read(path), text);
  EXPECT_EQ(fs::last_write_time(path), before);
}

TEST(StepLog, NoFileOrNotARegularFileIsNothingToCut) {
  EXPECT_EQ(tp::cut_step_log("/nonexistent-folder/run.jsonl", 0, "--log-json x").cut, 0);
  EXPECT_EQ(tp::cut_step_log("/dev/null", 0, "--log-json /dev/null").cut, 0);
}

}  // namespace
