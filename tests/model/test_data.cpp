// test_data.cpp — the held-out data of the token sources (model/data.h): --data's held-out tail
// never shares a row with training, the Markov data's held-out stream is the chain but not the
// training sequences (serial). The loss on it is tests/model/test_evaluate_mpi.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/data.h"
#include "test_util.h"

namespace tp {
namespace {

// --data's held-out tail: a file whose first 900 bytes are lower-case letters and whose last 100
// (10 %) are upper-case. No training row holds an upper-case byte and every held-out row holds only
// upper-case ones, over many steps.
TEST(HeldOut, TextRowsNeverCrossTheSplit) {
  const std::string path = testing::empty_test_folder("tp_data_") + "text.txt";
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>((i < 900 ? 'a' : 'A') + (i * 7) % 26);
  std::ofstream(path, std::ios::binary) << text;
  const TextSource src(path, 16, 3, 0.1);
  ASSERT_TRUE(src.has_held_out());
  EXPECT_NE(src.describe().find("the last 100 held out"), std::string::npos) << src.describe();
  int64_t train_upper = 0, held_lower = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const Batch t = src.batch(i, 8, 16), h = src.held_out_batch(i, 8, 16);
    for (size_t k = 0; k < t.ids.size(); ++k) {
      train_upper += (t.ids[k] < 'a') + (t.targets[k] < 'a');
      held_lower += (h.ids[k] >= 'a') + (h.targets[k] >= 'a');
    }
  }
  EXPECT_EQ(train_upper, 0);
  EXPECT_EQ(held_lower, 0);
  // Without a fraction (or with one too small for a row) nothing is held out, and training
  // reaches the end of the file.
  const TextSource all(path, 16, 3, 0.0);
  EXPECT_FALSE(all.has_held_out());
  int64_t upper = 0;
  for (int64_t i = 0; i < 200; ++i)
    for (int32_t id : all.batch(i, 8, 16).ids) upper += id < 'a';
  EXPECT_GT(upper, 0);
  const TextSource tiny(path, 16, 3, 0.01);  // 10 bytes < seq + 1
  EXPECT_FALSE(tiny.has_held_out());
  EXPECT_NE(tiny.describe().find("nothing held out"), std::string::npos) << tiny.describe();
  EXPECT_THROW(tiny.held_out_batch(0, 1, 16), Error);
}

// The Markov data's held-out stream: the same chain (every transition one of the table's), other
// sequences than any of the first 100 training steps'.
TEST(HeldOut, MarkovHeldOutStreamIsTheChainButNotTheTrainingSequences) {
  const MarkovSource src(64, 9);
  ASSERT_TRUE(src.has_held_out());
  const int64_t seq = 24, batch = 4;
  std::set<std::vector<int32_t>> training;
  auto rows = [&](const Batch& b) {
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(batch));
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t r = 0; r < batch; ++r) out[r].push_back(b.ids[s * batch + r]);
    return out;
  };
  for (int64_t i = 0; i < 100; ++i)
    for (const auto& r : rows(src.batch(i, batch, seq))) training.insert(r);
  for (int64_t i = 0; i < 10; ++i) {
    const Batch h = src.held_out_batch(i, batch, seq);
    for (size_t k = 0; k < h.ids.size(); ++k) {
      const auto& succ = src.successors(h.ids[k]);
      EXPECT_NE(std::find(succ.begin(), succ.end(), h.targets[k]), succ.end());
    }
    for (const auto& r : rows(h)) EXPECT_EQ(training.count(r), 0u);
  }
  EXPECT_NE(src.held_out_batch(0, batch, seq).ids, src.batch(0, batch, seq).ids);
}

}  // namespace
}  // namespace tp
