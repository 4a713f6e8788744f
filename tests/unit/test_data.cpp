// Data loading: tokenizer, file formats, errors for bad data, the default corpus, the split and
// deterministic sampling keyed by (seed, step, rank, micro-batch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "io/data.hpp"
#include "io/data_testing.hpp"
#include "unit/scratch_dir.hpp"

namespace kktrain {
namespace {

std::string write_file(const ScratchDir& dir, const std::string& name, const std::string& bytes) {
  const std::string p = dir.path(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

DataConfig data_cfg(std::optional<std::string> path, int64_t seq_len = 8) {
  DataConfig d;
  if (path) d.paths = {*path};
  d.seq_len = seq_len;
  d.val_fraction = 0.1;
  return d;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Tokenizer, ByteLevelRoundTrip) {
  const std::string s = "Hello, w\xc3\xb6rld!\n\x01\xff";
  const auto ids = byte_tokenize(s);
  ASSERT_EQ(ids.size(), s.size());
  EXPECT_EQ(ids[0], 'H');
  EXPECT_EQ(ids.back(), 255);
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 256);
  EXPECT_EQ(byte_detokenize(ids), s);
}

TEST(DefaultCorpus, DeterministicAndTextLike) {
  const std::string a = default_corpus(4096), b = default_corpus(4096);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, default_corpus(4096, 99));
  EXPECT_EQ(a.size(), 4096u);
  std::set<char> chars(a.begin(), a.end());
  EXPECT_LT(chars.size(), 60u);  // a small alphabet: letters, space, punctuation, newline
  EXPECT_NE(a.find(". "), std::string::npos);
  EXPECT_NE(a.find("\n\n"), std::string::npos);
}

TEST(TokenDataset, LoadsDefaultCorpusAndSplits) {
  const TokenDataset d = TokenDataset::load(data_cfg(std::nullopt, 64), 256);
  EXPECT_GT(d.train_tokens(), 900000);
  EXPECT_NEAR(static_cast<double>(d.val_tokens()) / (d.train_tokens() + d.val_tokens()), 0.1, 1e-3);
  EXPECT_NE(d.source().find("default corpus"), std::string::npos);
}

TEST(TokenDataset, BatchesAreDeterministicPerStepAndWindow) {
  const TokenDataset d = TokenDataset::load(data_cfg(std::nullopt, 16), 256);
  const Batch a = d.train_batch(5, 0, 4, 16);
  const Batch again = d.train_batch(5, 0, 4, 16);
  EXPECT_EQ(a.ids, again.ids);
  EXPECT_EQ(a.targets, again.targets);
  EXPECT_NE(a.ids, d.train_batch(6, 0, 4, 16).ids);
  EXPECT_NE(a.ids, d.train_batch(5, 4, 4, 16).ids);
  // targets are the next tokens of the same window
  for (int64_t r = 0; r < a.B; ++r) {
    for (int64_t t = 0; t + 1 < a.T; ++t) EXPECT_EQ(a.targets[r * a.T + t], a.ids[r * a.T + t + 1]);
  }
  // a different data.seed gives different batches
  DataConfig other = data_cfg(std::nullopt, 16);
  other.seed = 43;
  const TokenDataset d2 = TokenDataset::load(other, 256);
  EXPECT_NE(a.ids, d2.train_batch(5, 0, 4, 16).ids);
}

// The global batch defines the data: any split into micro-batches (or ranks) of contiguous
// window ranges yields the same windows in the same order.
TEST(TokenDataset, MicroBatchesAreSlicesOfTheGlobalBatch) {
  const TokenDataset d = TokenDataset::load(data_cfg(std::nullopt, 16), 256);
  for (int64_t step : {0, 1, 17}) {
    const Batch whole = d.train_batch(step, 0, 6, 16);
    for (int64_t B : {1, 2, 3}) {
      std::vector<int32_t> ids, targets;
      for (int64_t first = 0; first < 6; first += B) {
        const Batch part = d.train_batch(step, first, B, 16);
        ids.insert(ids.end(), part.ids.begin(), part.ids.end());
        targets.insert(targets.end(), part.targets.begin(), part.targets.end());
      }
      EXPECT_EQ(ids, whole.ids) << "step " << step << ", micro-batches of " << B;
      EXPECT_EQ(targets, whole.targets) << "step " << step << ", micro-batches of " << B;
    }
  }
}

TEST(TokenDataset, ValidationWindowsPadWithIgnoredTargets) {
  const TokenDataset d = TokenDataset::load(data_cfg(std::nullopt, 16), 256);
  const Batch full = d.val_windows(3, 4, 4, 16);
  const Batch part = d.val_windows(3, 2, 4, 16);
  EXPECT_EQ(std::vector<int32_t>(full.ids.begin(), full.ids.begin() + 32),
            std::vector<int32_t>(part.ids.begin(), part.ids.begin() + 32));
  EXPECT_EQ(std::vector<int32_t>(full.targets.begin(), full.targets.begin() + 32),
            std::vector<int32_t>(part.targets.begin(), part.targets.begin() + 32));
  for (std::size_t i = 32; i < part.targets.size(); ++i) EXPECT_EQ(part.targets[i], -1);
  EXPECT_EQ(d.val_batch(1, 4, 16).ids, d.val_windows(4, 4, 4, 16).ids);
}

TEST(TokenDataset, ValidationBatchesComeFromTheHeldOutTail) {
  // Token value = its position, so every id tells where it came from.
  std::vector<int32_t> toks(1000);
  for (std::size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>(i);
  DataConfig cfg = data_cfg(std::string("mem"), 8);
  cfg.val_fraction = 0.2;
  const TokenDataset d = test_hooks::token_dataset(toks, cfg, "mem");
  EXPECT_EQ(d.train_tokens(), 800);
  std::set<int32_t> starts;
  for (int step = 0; step < 200; ++step) {
    const Batch b = d.train_batch(step, 0, 4, 8);
    for (int64_t r = 0; r < 4; ++r) {
      starts.insert(b.ids[r * 8]);
      for (int64_t t = 0; t < 8; ++t) {
        ASSERT_EQ(b.ids[r * 8 + t], b.ids[r * 8] + t);  // contiguous windows
        ASSERT_LT(b.targets[r * 8 + t], 800);           // never into the validation tail
      }
    }
  }
  EXPECT_GT(starts.size(), 400u);  // positions are spread over the training split
  for (int i = 0; i < 20; ++i) {
    const Batch v = d.val_batch(i, 4, 8);
    for (int32_t id : v.ids) ASSERT_GE(id, 800);
  }
  EXPECT_EQ(d.val_batch(0, 4, 8).ids, d.val_batch(0, 4, 8).ids);
  EXPECT_NE(d.val_batch(0, 4, 8).ids, d.val_batch(1, 4, 8).ids);
}

// Every window start the sampler can produce, for each split: enough windows are drawn to see
// every start of the split's range (the whole image of the sampler's draw -> start mapping), and
// the test asserts it saw every one, so an off-by-one at either end of either range is seen for
// certain, not only when a random draw happens to hit it. Token value = its position: a window's
// ids and targets say which tokens it read. Every training window, targets included, must lie
// before the validation boundary (train_tokens()), every validation window after it.
struct SplitCase {
  int64_t tokens, seq_len;
  double val_fraction;
};

// Starts of `draws` windows of one split, each checked to be T + 1 contiguous tokens
// [start, start + T] inside [lo, hi). `window(k)` returns a batch of 64 windows, k = 0, 1, ...
template <class WindowBatch>
std::set<int64_t> starts_seen(WindowBatch window, int64_t draws, int64_t T, int64_t lo, int64_t hi,
                              const char* split) {
  std::set<int64_t> starts;
  for (int64_t k = 0; k * 64 < draws; ++k) {
    const Batch b = window(k);
    for (int64_t r = 0; r < b.B; ++r) {
      const int64_t start = b.ids[r * T];
      for (int64_t t = 0; t < T; ++t) {
        if (b.ids[r * T + t] != start + t || b.targets[r * T + t] != start + t + 1) {
          ADD_FAILURE() << split << " window at " << start << " is not contiguous";
          return starts;
        }
      }
      if (start < lo || start + T >= hi) {  // tokens [start, start + T] with the last target
        ADD_FAILURE() << split << " window reads tokens [" << start << ", " << start + T
                      << "], outside the " << split << " split [" << lo << ", " << hi << ")";
        return starts;
      }
      starts.insert(start);
    }
  }
  return starts;
}

TEST(TokenDataset, EveryWindowStartStaysInItsSplit) {
  // Ranges of 1 start (a split of exactly seq_len + 1 tokens), a few, and ~19000. Draws: 4x the
  // coupon-collector count n (ln n + 1) of n starts, so a start is missed with probability
  // < n exp(-4 (ln n + 1)) < 1e-7 (and the draws are fixed: the outcome never changes).
  const std::vector<SplitCase> cases = {
      {100, 8, 0.09},     // validation: exactly seq_len + 1 = 9 tokens, one start
      {18, 8, 0.5},       // both splits exactly seq_len + 1 tokens
      {1000, 8, 0.2},     // 792 and 192 starts
      {257, 31, 0.25},    // odd sizes
      {20000, 16, 0.05},  // 18984 and 984 starts
  };
  for (const SplitCase& c : cases) {
    std::vector<int32_t> toks(static_cast<std::size_t>(c.tokens));
    for (std::size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>(i);
    DataConfig cfg = data_cfg(std::string("mem"), c.seq_len);
    cfg.val_fraction = c.val_fraction;
    const TokenDataset d = test_hooks::token_dataset(toks, cfg, "mem");
    const int64_t T = c.seq_len, n_train = d.train_tokens(), n = c.tokens;
    ASSERT_TRUE(d.has_validation()) << c.tokens << " tokens";
    SCOPED_TRACE(std::to_string(n) + " tokens, seq_len " + std::to_string(T) + ", boundary " +
                 std::to_string(n_train));
    for (const bool val : {false, true}) {
      const int64_t lo = val ? n_train : 0, hi = val ? n : n_train;
      const int64_t range = hi - lo - T;  // starts lo .. hi - T - 1
      const double expected = range * std::log(static_cast<double>(range) + 1.0) + range;
      const int64_t draws = std::max<int64_t>(2000, static_cast<int64_t>(4 * expected));
      const std::set<int64_t> seen =
          val ? starts_seen([&](int64_t k) { return d.val_windows(k * 64, 64, 64, T); }, draws, T,
                            lo, hi, "validation")
              : starts_seen(
                    // Steps and window indices as training draws them: 64 windows of step k.
                    [&](int64_t k) { return d.train_batch(k, 64 * (k % 3), 64, T); }, draws, T, lo,
                    hi, "training");
      if (::testing::Test::HasFailure()) return;  // a window outside its split: reported above
      ASSERT_EQ(static_cast<int64_t>(seen.size()), range)
          << (val ? "validation" : "training") << ": " << seen.size() << " distinct starts seen in "
          << draws << " draws, expected every one of [" << lo << ", " << hi - T << ")";
      EXPECT_EQ(*seen.begin(), lo);
      EXPECT_EQ(*seen.rbegin(), hi - T - 1);
    }
  }
}

TEST(TokenDataset, ReadsTextAndBinaryTokenFiles) {
  const ScratchDir dir("kktrain_data_");
  const std::string text = write_file(dir, "a.txt", std::string(100, 'x') + "yz");
  const TokenDataset t = TokenDataset::load(data_cfg(text), 256);
  EXPECT_EQ(t.train_tokens() + t.val_tokens(), 102);

  std::string u16;
  for (int i = 0; i < 64; ++i) {
    u16.push_back(static_cast<char>(i * 5 & 0xff));
    u16.push_back(static_cast<char>(i >> 4));  // little-endian; ids up to 4*256+...
  }
  const std::string p16 = write_file(dir, "b.u16", u16);
  const TokenDataset b = TokenDataset::load(data_cfg(p16), 4096);
  EXPECT_EQ(b.train_tokens() + b.val_tokens(), 64);
  const Batch bb = b.train_batch(0, 0, 1, 8);
  for (int32_t id : bb.ids) EXPECT_LT(id, 4096);

  std::string u32(4 * 40, '\0');
  for (int i = 0; i < 40; ++i) u32[4 * i + 2] = 1;  // 65536 each
  const std::string p32 = write_file(dir, "c.u32", u32);
  EXPECT_EQ(TokenDataset::load(data_cfg(p32), 70000).train_tokens() +
                TokenDataset::load(data_cfg(p32), 70000).val_tokens(),
            40);
  DataConfig forced = data_cfg(p32);
  forced.format = DataFormat::uint16;  // the same bytes read as uint16 tokens: twice as many
  EXPECT_EQ(TokenDataset::load(forced, 70000).train_tokens() +
                TokenDataset::load(forced, 70000).val_tokens(),
            80);
}

TEST(TokenDataset, BadDataGivesOneClearError) {
  const ScratchDir dir("kktrain_data_");
  const std::string missing = dir.path("does_not_exist.txt");
  EXPECT_NE(message_of([&] { TokenDataset::load(data_cfg(missing), 256); }).find("cannot open"),
            std::string::npos);
  const std::string empty = write_file(dir, "empty.txt", "");
  EXPECT_NE(message_of([&] { TokenDataset::load(data_cfg(empty), 256); }).find("is empty"),
            std::string::npos);
  const std::string tiny = write_file(dir, "tiny.txt", "abc");
  const std::string m = message_of([&] { TokenDataset::load(data_cfg(tiny, 8), 256); });
  EXPECT_NE(m.find("fewer than data.seq_len + 1 = 9"), std::string::npos) << m;
  const std::string odd = write_file(dir, "odd.u16", "abc");
  EXPECT_NE(message_of([&] { TokenDataset::load(data_cfg(odd), 256); }).find("whole number"),
            std::string::npos);
  const std::string text = write_file(dir, "big.txt", std::string(50, 'z'));  // 'z' = 122
  const std::string v = message_of([&] { TokenDataset::load(data_cfg(text), 100); });
  EXPECT_NE(v.find("token id 122"), std::string::npos) << v;
  EXPECT_NE(v.find("vocab_size >= 256"), std::string::npos) << v;
  for (const std::string& msg : {m, v}) EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(TokenDataset, NoValidationSplitIsReportedWhenAsked) {
  DataConfig cfg = data_cfg(std::nullopt, 8);
  cfg.val_fraction = 0.0;
  const TokenDataset d = TokenDataset::load(cfg, 256);
  EXPECT_FALSE(d.has_validation());
  EXPECT_NE(message_of([&] { d.val_batch(0, 2, 8); }).find("no validation split"),
            std::string::npos);
}

}  // namespace
}  // namespace kktrain
