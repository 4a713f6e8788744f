// Token files read in place (io/token_file.hpp) and corpora of several files (io/data.hpp):
//  - llm.c shards: the header recognized by data.format auto, its version and token count checked;
//    a headerless .bin stays uint16;
//  - a list of files and a glob: every window lies inside one file and inside its split, every
//    start of every file's range is drawn (exhaustively, so an off-by-one at a file boundary is
//    seen for certain), and the global batch is the same however it is split;
//  - token ids checked as windows are drawn (large files), naming the file and the position;
//  - special files (a FIFO, a directory) are refused without blocking;
//  - a file truncated or rewritten while open is an error naming it (RuntimeFailure), not SIGBUS;
//  - drawing windows from a 1 GiB file does not grow the resident set (reads, no mapping);
//  - every test removes what it writes (ScratchDir).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "io/data.hpp"
#include "io/token_file.hpp"
#include "unit/scratch_dir.hpp"

namespace kktrain {
namespace {

void put_u16(std::string& s, uint32_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>((v >> 8) & 0xff));
}
void put_i32(std::string& s, int32_t v) {
  for (int b = 0; b < 4; ++b)
    s.push_back(static_cast<char>((static_cast<uint32_t>(v) >> (8 * b)) & 0xff));
}

std::string write_file(const ScratchDir& dir, const std::string& name, const std::string& bytes) {
  const std::string p = dir.path(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// An llm.c shard of `tokens` (header: magic, version, count, zeros).
std::string llmc_bytes(const std::vector<uint32_t>& tokens, int32_t version, int32_t count) {
  std::string s;
  put_i32(s, kLlmcMagic);
  put_i32(s, version);
  put_i32(s, count);
  for (int i = 3; i < kLlmcHeaderInts; ++i) put_i32(s, 0);
  for (uint32_t t : tokens) put_u16(s, t);
  return s;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

DataConfig cfg_of(std::vector<std::string> paths, int64_t seq_len, double val_fraction) {
  DataConfig d;
  d.paths = std::move(paths);
  d.seq_len = seq_len;
  d.val_fraction = val_fraction;
  return d;
}

TEST(TokenFiles, LlmcShardsAreRecognizedAndChecked) {
  const ScratchDir dir("kktrain_tokfiles_");
  std::vector<uint32_t> toks;
  for (uint32_t i = 0; i < 300; ++i) toks.push_back(i * 7 % 50000);
  const std::string good = write_file(dir, "good.bin", llmc_bytes(toks, 1, 300));
  const TokenFile f(good, "auto");
  EXPECT_EQ(f.format(), "llmc");
  ASSERT_EQ(f.size(), 300);
  std::vector<int32_t> out(300);
  f.read(0, 300, out.data());
  for (int i = 0; i < 300; ++i) ASSERT_EQ(out[i], static_cast<int32_t>(toks[i]));
  EXPECT_EQ(TokenFile(good, "llmc").size(), 300);
  // The same bytes as headerless uint16: the header's 512 uint16 tokens come first.
  EXPECT_EQ(TokenFile(good, "uint16").size(), 300 + 2 * kLlmcHeaderInts);

  const std::string v2 = write_file(dir, "v2.bin", llmc_bytes(toks, 2, 300));
  std::string m = message_of([&] { TokenFile(v2, "auto"); });
  EXPECT_NE(m.find("version 2"), std::string::npos) << m;
  EXPECT_NE(m.find(v2), std::string::npos) << m;
  const std::string count = write_file(dir, "count.bin", llmc_bytes(toks, 1, 301));
  m = message_of([&] { TokenFile(count, "auto"); });
  EXPECT_NE(m.find("says 301 tokens"), std::string::npos) << m;
  EXPECT_NE(m.find("1624 bytes"), std::string::npos) << m;  // 1024 + 2 * 300
  // A .bin without the magic is headerless uint16; asked for llmc, it is refused.
  std::string plain;
  for (uint32_t t : toks) put_u16(plain, t);
  const std::string headerless = write_file(dir, "plain.bin", plain);
  const TokenFile h(headerless, "auto");
  EXPECT_EQ(h.format(), "uint16");
  EXPECT_EQ(h.size(), 300);
  m = message_of([&] { TokenFile(headerless, "llmc"); });
  EXPECT_NE(m.find("not an llm.c token shard"), std::string::npos) << m;
  for (const auto& msg : {m}) EXPECT_EQ(msg.find('\n'), std::string::npos);
}

// Three files of different lengths whose token value is a global position: file k holds
// [base_k, base_k + n_k), so an id says which file and where.
struct Corpus {
  std::vector<std::string> paths;
  std::vector<int64_t> base, n;
};

Corpus value_coded_corpus(const ScratchDir& dir, const std::string& stem,
                          const std::vector<int64_t>& sizes) {
  Corpus c;
  int64_t at = 0;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    std::string bytes;
    for (int64_t i = 0; i < sizes[k]; ++i) put_u16(bytes, static_cast<uint32_t>(at + i));
    c.paths.push_back(write_file(dir, stem + "_" + std::to_string(k) + ".u16", bytes));
    c.base.push_back(at);
    c.n.push_back(sizes[k]);
    at += sizes[k] + 1000;  // a gap between files' values
  }
  return c;
}

TEST(TokenFiles, WindowsCoverEveryFileWithoutStraddling) {
  const int64_t T = 8;
  const ScratchDir dir("kktrain_tokfiles_");
  const Corpus c = value_coded_corpus(dir, "cover", {100, 9, 257});  // 9 = exactly one window
  DataConfig cfg = cfg_of(c.paths, T, 0.2);
  const TokenDataset d = TokenDataset::load(cfg, 65536);
  // The glob of the same files gives the same dataset (sorted: _0, _1, _2).
  DataConfig globbed = cfg_of({dir.path("cover_*.u16")}, T, 0.2);
  EXPECT_EQ(data_files(globbed), c.paths);
  EXPECT_EQ(TokenDataset::load(globbed, 65536).train_batch(3, 0, 16, T).ids,
            d.train_batch(3, 0, 16, T).ids);
  for (const bool val : {false, true}) {
    // Expected starts: in file k, [0, n_train_k - T) for training, [n_train_k, n_k - T) for
    // validation (each file split on its own: 20 % of 100 is 20, of 9 is 1 < 9 -> none, of 257
    // is 51).
    std::set<int64_t> expected;
    for (std::size_t k = 0; k < c.n.size(); ++k) {
      int64_t n_val = static_cast<int64_t>(c.n[k] * 0.2);
      if (n_val > 0 && n_val < T + 1) n_val = 0;
      const int64_t lo = val ? c.n[k] - n_val : 0, hi = val ? c.n[k] : c.n[k] - n_val;
      for (int64_t s = lo; s + T < hi; ++s) expected.insert(c.base[k] + s);
    }
    std::set<int64_t> seen;
    for (int64_t draw = 0; draw < 200 && seen.size() < expected.size(); ++draw) {
      const Batch b = val ? d.val_windows(draw * 64, 64, 64, T) : d.train_batch(draw, 0, 64, T);
      for (int64_t r = 0; r < b.B; ++r) {
        const int64_t start = b.ids[r * T];
        for (int64_t t = 0; t < T; ++t) {  // T + 1 consecutive values: one file, no straddle
          ASSERT_EQ(b.ids[r * T + t], start + t) << (val ? "validation" : "training");
          ASSERT_EQ(b.targets[r * T + t], start + t + 1);
        }
        ASSERT_TRUE(expected.count(start)) << "start " << start << " is outside its split";
        seen.insert(start);
      }
    }
    EXPECT_EQ(seen, expected) << (val ? "validation" : "training") << ": not every start drawn";
  }
}

TEST(TokenFiles, GlobalBatchIsTheSameHoweverSplit) {
  const ScratchDir dir("kktrain_tokfiles_");
  const Corpus c = value_coded_corpus(dir, "split", {300, 41, 1000, 77});
  const TokenDataset d = TokenDataset::load(cfg_of(c.paths, 16, 0.1), 65536);
  for (int64_t step : {0, 5, 123}) {
    const Batch whole = d.train_batch(step, 0, 12, 16);
    for (int64_t B : {1, 2, 3, 4, 6}) {
      std::vector<int32_t> ids;
      for (int64_t first = 0; first < 12; first += B) {
        const Batch part = d.train_batch(step, first, B, 16);
        ids.insert(ids.end(), part.ids.begin(), part.ids.end());
      }
      EXPECT_EQ(ids, whole.ids) << "step " << step << ", slices of " << B;
    }
  }
}

TEST(TokenFiles, IdsAreCheckedAsWindowsAreDrawn) {
  // Every token 300 after position 20: with the check at load lowered to nothing (as for a file
  // above kValidateAtLoadTokens), loading succeeds and the first window that reads one fails.
  std::string bytes;
  for (int i = 0; i < 400; ++i) put_u16(bytes, i < 20 ? 1 : 300);
  const ScratchDir dir("kktrain_tokfiles_");
  const std::string path = write_file(dir, "bad.u16", bytes);
  const DataConfig cfg = cfg_of({path}, 8, 0.0);
  std::string m = message_of([&] { TokenDataset::load(cfg, 256); });
  EXPECT_NE(m.find("token id 300 at position 20"), std::string::npos) << m;  // small: at load
  TokenLoadOptions none_at_load;
  none_at_load.validate_at_load_tokens = 0;
  const TokenDataset d = TokenDataset::load(cfg, 256, none_at_load);
  m = message_of([&] { d.train_batch(0, 0, 8, 8); });
  EXPECT_NE(m.find("token id 300 at position"), std::string::npos) << m;
  EXPECT_NE(m.find(path + " (uint16)"), std::string::npos) << m;
  EXPECT_NE(m.find("model.vocab_size 256"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(TokenFiles, SpecialFilesAreRefusedWithoutBlocking) {
  // Opened without blocking and checked by type: a FIFO without a writer would block open().
  const ScratchDir dir("kktrain_tokfiles_");
  const std::string fifo = dir.path("fifo.u16");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string m = message_of([&] { TokenFile(fifo, "auto"); });
  EXPECT_NE(m.find(fifo + "' is a FIFO"), std::string::npos) << m;
  m = message_of([&] { TokenFile(dir.dir(), "uint16"); });
  EXPECT_NE(m.find("is a directory"), std::string::npos) << m;
}

// The message of the RuntimeFailure f throws ("" when it throws none).
std::string failure_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const RuntimeFailure& e) {
    return e.what();
  }
  return "";
}

TEST(TokenFiles, AFileChangedWhileOpenIsAnErrorNotASignal) {
  // Truncated under an open file, a mapping faults (SIGBUS); reads return short and the size
  // is checked: every read after the change is an error naming the file, the part still there
  // included.
  const ScratchDir dir("kktrain_tokfiles_");
  std::string bytes;
  for (int i = 0; i < 400; ++i) put_u16(bytes, static_cast<uint32_t>(i));
  const std::string path = write_file(dir, "shrinks.u16", bytes);
  const TokenFile f(path, "auto");
  std::vector<int32_t> out(8);
  f.read(300, 8, out.data());
  EXPECT_EQ(out[0], 300);
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  for (const int64_t at : {int64_t(300), int64_t(0)}) {
    const std::string m = failure_of([&] { f.read(at, 8, out.data()); });
    EXPECT_NE(m.find("data file '" + path + "' changed during the run (size 800 -> 100 bytes)"),
              std::string::npos)
        << m;
  }
  // Rewritten in place with the same size (cp of another corpus): the modification time says so.
  const std::string same = write_file(dir, "rewritten.u16", bytes);
  const TokenFile g(same, "auto");
  std::ofstream(same, std::ios::binary) << std::string(bytes.size(), '\1');
  const struct timespec later[2] = {{0, UTIME_OMIT}, {::time(nullptr) + 5, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, same.c_str(), later, 0), 0);
  const std::string m = failure_of([&] { g.read(0, 8, out.data()); });
  EXPECT_NE(m.find("data file '" + same + "' changed during the run (same size, 800 bytes"),
            std::string::npos)
      << m;
}

// VmRSS of /proc/self/status, or one of its parts (RssAnon, RssFile), in bytes.
int64_t resident_bytes(const char* field = "VmRSS:") {
  std::ifstream f("/proc/self/status");
  std::string key;
  int64_t kib = -1;
  while (f >> key) {
    if (key == field) {
      f >> kib;
      break;
    }
  }
  return kib * 1024;
}

TEST(TokenFiles, DrawingWindowsKeepsTheResidentSetFlat) {
  // A 1 GiB sparse uint16 file (zeros: valid ids): 19200 windows at random places touch 19200+
  // pages (75 MiB and more) that a mapping would keep resident; read with pread, none of the
  // file's pages is mapped into the process, so the resident set does not grow.
  const ScratchDir dir("kktrain_tokfiles_");
  const std::string path = dir.path("sparse.u16");
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(::ftruncate(::fileno(f), int64_t(1) << 30), 0);
    std::fclose(f);
  }
  const TokenDataset d = TokenDataset::load(cfg_of({path}, 256, 0.0), 256);
  d.train_batch(0, 0, 64, 256);  // first use of the buffers
  const int64_t before = resident_bytes(), file0 = resident_bytes("RssFile:"),
                anon0 = resident_bytes("RssAnon:");
  for (int64_t step = 1; step <= 300; ++step) d.train_batch(step, 0, 64, 256);
  const int64_t grown = resident_bytes() - before;
  const int64_t file_grown = resident_bytes("RssFile:") - file0;
  std::printf(
      "resident set after 19200 windows of a 1 GiB file: %+.1f MiB (file pages %+.1f MiB, "
      "anonymous %+.1f MiB)\n",
      grown / 1048576.0, (resident_bytes("RssFile:") - file0) / 1048576.0,
      (resident_bytes("RssAnon:") - anon0) / 1048576.0);
  // The file's pages (RssFile: the anonymous part is the allocator's, which a sanitizer's
  // quarantine of freed batches inflates) stay unmapped (a mapping that dropped only each
  // window's own pages: +31 MiB).
  EXPECT_LT(file_grown, int64_t(8) << 20);
}

}  // namespace
}  // namespace kktrain
