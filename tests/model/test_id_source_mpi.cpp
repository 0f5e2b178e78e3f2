// test_id_source_mpi.cpp — IdSource (model/data.h), the token ids tp_train --data F --tokenizer DIR
// trains on: every row is a window of consecutive ids, targets are the ids one later, the same
// batch for the same (seed, step), and too few ids or an id outside the vocabulary is bad input.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "expect_bad_input.h"
#include "model/data.h"

namespace {

using namespace tp;
using tp::testing::expect_bad_input;

// ids[i] = i: a row starting at offset o holds o, o + 1, ...
std::vector<int32_t> counting(int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

TEST(IdSource, RowsAreWindowsAndTargetsTheNextIds) {
  const int64_t seq = 5, batch = 3;
  IdSource source(counting(40), 50, seq, 7, "forty ids");
  EXPECT_EQ(source.vocab(), 50);
  EXPECT_EQ(source.describe(), "forty ids (40 tokens, V = 50)");
  for (int64_t step = 0; step < 4; ++step) {
    const Batch b = source.batch(step, batch, seq);
    ASSERT_EQ(b.ids.size(), static_cast<size_t>(seq * batch));
    for (int64_t r = 0; r < batch; ++r) {
      const int32_t first = b.ids[static_cast<size_t>(r)];  // position (0, r)
      EXPECT_GE(first, 0);
      EXPECT_LE(first + seq, 39);  // the last target is inside the ids
      for (int64_t s = 0; s < seq; ++s) {
        EXPECT_EQ(b.ids[static_cast<size_t>(s * batch + r)], first + s);
        EXPECT_EQ(b.targets[static_cast<size_t>(s * batch + r)], first + s + 1);
      }
    }
    EXPECT_EQ(source.batch(step, batch, seq).ids, b.ids);  // (seed, step) decides
  }
  EXPECT_NE(source.batch(0, batch, seq).ids, source.batch(1, batch, seq).ids);
}

TEST(IdSource, TooFewIdsOrAnIdOutsideTheVocabularyIsBadInput) {
  expect_bad_input([&] { IdSource(counting(5), 50, 5, 7, "five ids"); },
                   "five ids has 5 tokens; one training sequence needs",
                   "five ids (no sequence of 5 + 1)");
  expect_bad_input([&] { IdSource(counting(40), 30, 5, 7, "forty ids"); },
                   "token 30 is id 30, outside the vocabulary [0, 30)", "id 30 (outside V = 30)");
}

}  // namespace
