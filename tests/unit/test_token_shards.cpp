// The llm.c shard writer (io/token_shards.hpp):
//  - headers and ids: uint16 (magic 20240520, version 1) and uint32 (20240801, version 7), the
//    choice from the vocabulary size (65536 ids fit 16 bits, 65537 do not);
//  - whole documents into the val shard until it holds val_tokens, then training shards of at most
//    shard_tokens; a document never straddles two shards, a longer one gets a shard of its own;
//  - the shards read back through TokenFile (data.path) with the same ids;
//  - a write that fails (RLIMIT_FSIZE: EFBIG, as a full disk's ENOSPC) is one RuntimeFailure naming
//    the shard, and neither the temporary nor any shard completed before it is left;
//  - a writer dropped before finish() leaves nothing; shards of an earlier run are listed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "io/token_file.hpp"
#include "io/token_shards.hpp"
#include "unit/scratch_dir.hpp"

namespace kktrain {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

int32_t le32(const std::string& s, std::size_t at) {
  uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= uint32_t(static_cast<unsigned char>(s[at + b])) << (8 * b);
  return int32_t(v);
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<int32_t> iota(int32_t from, int n) {
  std::vector<int32_t> v(std::size_t(n), 0);
  std::iota(v.begin(), v.end(), from);
  return v;
}

// The ids of a shard read back as data.path reads it.
std::vector<int32_t> read_back(const std::string& path) {
  TokenFile f(path, "auto");
  EXPECT_EQ(f.format(), "llmc");
  std::vector<int32_t> ids(std::size_t(f.size()));
  f.read(0, f.size(), ids.data());
  return ids;
}

TEST(TokenShards, FormatFollowsTheVocabulary) {
  EXPECT_EQ(shard_ids_for_vocab(256), ShardIds::uint16);
  EXPECT_EQ(shard_ids_for_vocab(65536), ShardIds::uint16);
  EXPECT_EQ(shard_ids_for_vocab(65537), ShardIds::uint32);
  EXPECT_EQ(shard_ids_for_vocab(128256), ShardIds::uint32);
  EXPECT_EQ(train_shard_name("a/b", 3), "a/b_000003.bin");
  EXPECT_EQ(val_shard_name("b", 0), "b_val_000000.bin");
}

TEST(TokenShards, ValThenShardsOfWholeDocuments) {
  ScratchDir tmp;
  ShardPlan plan;
  plan.prefix = tmp.path("c");
  plan.shard_tokens = 10;
  plan.val_tokens = 5;
  ShardWriter w(plan);
  // val: 3 + 4 (>= 5); then 6 + 4 = 10 | 6 | 25 (alone, longer than a shard) | 1
  const std::vector<std::vector<int32_t>> docs = {
      iota(0, 3), iota(3, 4), iota(7, 6), iota(13, 4), iota(17, 6), iota(23, 25), {}, iota(48, 1)};
  for (const auto& d : docs) w.add_document(d.data(), int64_t(d.size()));
  const auto files = w.finish();
  const std::vector<std::string> want = {plan.prefix + "_val_000000.bin",
                                         plan.prefix + "_000000.bin", plan.prefix + "_000001.bin",
                                         plan.prefix + "_000002.bin", plan.prefix + "_000003.bin"};
  EXPECT_EQ(files, want);
  EXPECT_EQ(read_back(want[0]), iota(0, 7));
  EXPECT_EQ(read_back(want[1]), iota(7, 10));
  EXPECT_EQ(read_back(want[2]), iota(17, 6));
  EXPECT_EQ(read_back(want[3]), iota(23, 25));
  EXPECT_EQ(read_back(want[4]), iota(48, 1));
  EXPECT_EQ(w.tokens(), 49);
  EXPECT_EQ(w.val_tokens_written(), 7);
  const std::string s = slurp(want[1]);
  ASSERT_EQ(s.size(), 1024u + 2 * 10);
  EXPECT_EQ(le32(s, 0), 20240520);
  EXPECT_EQ(le32(s, 4), 1);
  EXPECT_EQ(le32(s, 8), 10);
  for (std::size_t i = 12; i < 1024; ++i) EXPECT_EQ(s[i], 0) << i;
  EXPECT_EQ(listing(tmp.dir()).size(), 5u);  // no temporaries
  // sorted by name: the training shards, then the val shard ('_0' < '_v')
  EXPECT_EQ(existing_shards(plan.prefix),
            (std::vector<std::string>{want[1], want[2], want[3], want[4], want[0]}));
}

TEST(TokenShards, Uint32HeaderAndIds) {
  ScratchDir tmp;
  ShardPlan plan;
  plan.prefix = tmp.path("w");
  plan.ids = ShardIds::uint32;
  ShardWriter w(plan);
  const std::vector<int32_t> ids = {0, 65535, 65536, 128255, 7};
  w.add_document(ids.data(), 5);
  w.finish();
  const std::string s = slurp(tmp.path("w_000000.bin"));
  ASSERT_EQ(s.size(), 1024u + 4 * 5);
  EXPECT_EQ(le32(s, 0), 20240801);
  EXPECT_EQ(le32(s, 4), 7);
  EXPECT_EQ(le32(s, 8), 5);
  EXPECT_EQ(le32(s, 1024 + 12), 128255);
  EXPECT_EQ(read_back(tmp.path("w_000000.bin")), ids);
}

TEST(TokenShards, DroppedBeforeFinishLeavesNothing) {
  ScratchDir tmp;
  {
    ShardPlan plan;
    plan.prefix = tmp.path("c");
    plan.shard_tokens = 4;
    ShardWriter w(plan);
    for (int k = 0; k < 5; ++k) w.add_document(iota(k * 4, 4).data(), 4);
  }
  EXPECT_TRUE(listing(tmp.dir()).empty());
}

TEST(TokenShards, AFailedWriteKeepsNoShard) {
  ScratchDir tmp;
  ::signal(SIGXFSZ, SIG_IGN);  // a write past RLIMIT_FSIZE then fails with EFBIG
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit lim = old;
  lim.rlim_cur = 1024 + 2 * 1000;  // a shard of 1000 uint16 ids fits, one more byte does not
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::string what;
  {
    ShardPlan plan;
    plan.prefix = tmp.path("c");
    plan.shard_tokens = 1000;
    ShardWriter w(plan);
    const auto doc = iota(0, 1000);
    try {
      w.add_document(doc.data(), 1000);  // shard 0: complete once the next one starts
      w.add_document(doc.data(), 1000);
      w.add_document(doc.data(), 1000);
      const auto big = std::vector<int32_t>(600000, 1);  // shard 3: its buffer's flush fails
      w.add_document(big.data(), int64_t(big.size()));
      w.finish();
    } catch (const RuntimeFailure& e) {
      what = e.what();
    }
    EXPECT_EQ(listing(tmp.dir()).size(), 3u + 1);  // 3 shards and the failed temporary, until
  }                                                // the writer goes
  setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, SIG_DFL);
  EXPECT_NE(what.find("c_000003.bin"), std::string::npos) << what;
  EXPECT_NE(what.find("File too large"), std::string::npos) << what;
  EXPECT_TRUE(listing(tmp.dir()).empty());
}

}  // namespace
}  // namespace kktrain
