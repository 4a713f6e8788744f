// The example cache and its epochs (io/example_data.hpp): every example once an epoch, rows that
// hold whole examples with the right targets and starts, a step's rows independent of how they
// are split into micro-batches, and a resume's batches equal to an uninterrupted run's.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/errors.hpp"
#include "io/example_data.hpp"
#include "unit/scratch_dir.hpp"

namespace kktrain {
namespace {

// Example i: length 2 + (i * 7) % 11 tokens, ids 1000 * i + k, loss on odd k.
std::vector<int32_t> example_ids(int64_t i) {
  std::vector<int32_t> ids(static_cast<std::size_t>(2 + (i * 7) % 11));
  for (std::size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<int32_t>(1000 * i + k);
  return ids;
}
std::vector<uint8_t> example_loss(int64_t i) {
  std::vector<uint8_t> m(example_ids(i).size());
  for (std::size_t k = 0; k < m.size(); ++k) m[k] = k % 2;
  return m;
}

void write_examples(const std::string& prefix, int64_t n) {
  ExampleWriter w(prefix);
  for (int64_t i = 0; i < n; ++i) w.add(example_ids(i), example_loss(i));
  w.finish();
}

DataConfig config(bool packing, int64_t T, int64_t G) {
  DataConfig d;
  d.packing = packing;
  d.seq_len = T;
  d.global_batch_size = G;
  d.seed = 7;
  return d;
}

// The examples of a row, recovered from its ids and starts, checked against the cache.
std::vector<int64_t> row_examples(const Batch& b, int64_t r) {
  std::vector<int64_t> out;
  const int64_t T = b.T;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t start = b.starts[r * T + t];
    EXPECT_LE(start, t);
    if (start != t || (b.targets[r * T + t] == -1 && b.ids[r * T + t] == 0)) continue;
    const int64_t ex = b.ids[r * T + t] / 1000;
    const std::vector<int32_t> ids = example_ids(ex);
    const std::vector<uint8_t> loss = example_loss(ex);
    for (std::size_t k = 0; k < ids.size(); ++k) {
      EXPECT_EQ(b.ids[r * T + t + k], ids[k]);
      EXPECT_EQ(b.starts[r * T + t + k], t);
      const int32_t want = k + 1 < ids.size() && loss[k + 1] ? ids[k + 1] : -1;
      EXPECT_EQ(b.targets[r * T + t + k], want) << "example " << ex << " token " << k;
    }
    out.push_back(ex);
  }
  return out;
}

TEST(ExampleData, PermutationIsABijection) {
  for (int64_t n : {1, 2, 3, 17, 100, 1000}) {
    std::set<int64_t> seen;
    for (int64_t k = 0; k < n; ++k) seen.insert(epoch_position(5, 3, n, k));
    EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  // Epochs differ.
  int same = 0;
  for (int64_t k = 0; k < 100; ++k)
    same += epoch_position(5, 0, 100, k) == epoch_position(5, 1, 100, k);
  EXPECT_LT(same, 20);
}

TEST(ExampleData, EveryExampleOnceAnEpochWholeInItsRow) {
  ScratchDir dir;
  const int64_t n = 203;
  write_examples(dir.path("train"), n);
  for (bool packing : {false, true}) {
    const int64_t T = 24, G = 8;
    ExampleData data(dir.dir(), config(packing, T, G));
    EXPECT_EQ(data.train_examples(), n);
    int64_t step = 0;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::map<int64_t, int> seen;
      const int64_t steps = data.steps_in_epoch(epoch);
      if (packing) {
        EXPECT_LT(steps, (n + G - 1) / G) << "packing saves rows";
      } else {
        EXPECT_EQ(steps, (n + G - 1) / G);
      }
      for (int64_t s = 0; s < steps; ++s, ++step) {
        const Batch b = data.train_batch(step, 0, G);
        int64_t loss_tokens = 0;
        for (int64_t r = 0; r < G; ++r) {
          for (int64_t ex : row_examples(b, r)) {
            ++seen[ex];
            for (std::size_t k = 1; k < example_loss(ex).size(); ++k)
              loss_tokens += example_loss(ex)[k];
          }
        }
        EXPECT_EQ(b.loss_tokens, loss_tokens);
        int64_t e = -1, se = -1;
        data.locate(step, &e, &se);
        EXPECT_EQ(e, epoch);
        EXPECT_EQ(se, s);
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), n) << "packing " << packing;
      for (const auto& [ex, count] : seen) EXPECT_EQ(count, 1) << ex;
    }
  }
}

TEST(ExampleData, SplitAndResumeDrawTheSameRows) {
  ScratchDir dir;
  write_examples(dir.path("train"), 150);
  const DataConfig cfg = config(true, 32, 8);
  ExampleData whole(dir.dir(), cfg);
  for (int64_t step : {0, 3, 9, 4}) {  // 4 after 9: back into an earlier epoch position
    const Batch all = whole.train_batch(step, 0, 8);
    ExampleData fresh(dir.dir(), cfg);  // a resume at `step`
    for (int64_t first = 0; first < 8; first += 2) {
      const Batch part = fresh.train_batch(step, first, 2);
      EXPECT_EQ(part.loss_tokens, all.loss_tokens);
      for (int64_t i = 0; i < 2 * 32; ++i) {
        EXPECT_EQ(part.ids[i], all.ids[first * 32 + i]);
        EXPECT_EQ(part.targets[i], all.targets[first * 32 + i]);
        EXPECT_EQ(part.starts[i], all.starts[first * 32 + i]);
      }
    }
  }
}

// Every epoch is the same number of steps: 10^9 epochs are planned in constant time, and a step
// of a late epoch is drawn without packing the epochs before it.
TEST(ExampleData, EpochsArePlannedInConstantTime) {
  ScratchDir dir;
  write_examples(dir.path("train"), 150);
  const ExampleData data(dir.dir(), config(true, 32, 8));
  const int64_t per_epoch = data.steps_in_epoch(0);
  EXPECT_EQ(data.steps_in_epoch(123456789), per_epoch);
  EXPECT_EQ(data.steps_for_epochs(1000000000), 1000000000 * per_epoch);
  EXPECT_EQ(data.steps_for_epochs(INT64_MAX), -1);  // overflow, said as such
  const int64_t step = 999999999 * per_epoch + 2;
  int64_t e = -1, s = -1;
  data.locate(step, &e, &s);
  EXPECT_EQ(e, 999999999);
  EXPECT_EQ(s, 2);
  const Batch b = data.train_batch(step, 0, 8);
  int64_t examples = 0;
  for (int64_t r = 0; r < 8; ++r) examples += static_cast<int64_t>(row_examples(b, r).size());
  EXPECT_GT(examples, 8);  // packed rows
}

TEST(ExampleData, ValidationRowsInFileOrder) {
  ScratchDir dir;
  write_examples(dir.path("train"), 10);
  write_examples(dir.path("val"), 5);
  ExampleData data(dir.dir(), config(false, 16, 4));
  EXPECT_EQ(data.val_row_count(), 5);
  const Batch b = data.val_rows(3, 2, 4);
  EXPECT_EQ(row_examples(b, 0), std::vector<int64_t>{3});
  EXPECT_EQ(row_examples(b, 1), std::vector<int64_t>{4});
  EXPECT_TRUE(row_examples(b, 2).empty());
  // Rows asked for past the split's end are empty (a rank whose share starts past them).
  const Batch past = data.val_rows(4, 3, 4);
  EXPECT_EQ(row_examples(past, 0), std::vector<int64_t>{4});
  EXPECT_TRUE(row_examples(past, 1).empty());
}

// A writer that fails (here its final name is taken by a directory, as a full disk fails its
// writes) or is never finished leaves no temporary behind.
TEST(ExampleData, AFailedWriterLeavesNothing) {
  ScratchDir dir;
  std::filesystem::create_directory(dir.path("train.tokens"));
  EXPECT_THROW(write_examples(dir.path("train"), 5), RuntimeFailure);
  {
    ExampleWriter unfinished(dir.path("other"));
    unfinished.add(example_ids(1), example_loss(1));
  }
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.dir())) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"train.tokens"});
}

TEST(ExampleData, ATruncatedCacheIsRefused) {
  ScratchDir dir;
  write_examples(dir.path("train"), 10);
  std::filesystem::resize_file(dir.path("train.tokens"), 8);
  try {
    ExampleData data(dir.dir(), config(false, 16, 4));
    FAIL() << "no error";
  } catch (const RuntimeFailure& e) {
    EXPECT_NE(std::string(e.what()).find("train.tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kktrain
