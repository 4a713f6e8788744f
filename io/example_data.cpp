// Examples in a cache, drawn in epochs (io/example_data.hpp).
#include "io/example_data.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/errors.hpp"
#include "core/random.hpp"
#include "io/durable.hpp"

namespace kktrain {

namespace {

constexpr uint64_t kIndexMagic = 0x6b6b6578616d706cull;  // "kkexampl"
constexpr uint64_t kIndexVersion = 1;
constexpr int64_t kHeaderBytes = 32, kEntryBytes = 16;
constexpr uint32_t kLossBit = 1u << 31;
constexpr uint32_t kSideBit = 1u << 30;  // a preference pair's rejected side starts here
constexpr int64_t kMaxId = (int64_t(1) << 30) - 1;
constexpr uint64_t kPermutationStream = 0x53465450ull;  // "SFTP"

template <class T>
void put(std::vector<unsigned char>* out, T v) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts (as the token files)
  out->insert(out->end(), b, b + sizeof(T));
}

template <class T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void write_all(std::FILE* f, const void* p, std::size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(p, 1, n, f) != n) {
    throw RuntimeFailure("cannot write '" + path + "': " + std::strerror(errno));
  }
}

}  // namespace

// The two temporaries being written: closed and removed when they go, unless committed (so a
// failure at any point, a full disk included, leaves nothing behind).
struct ExampleWriter::Files {
  std::string tokens_tmp, index_tmp;
  std::FILE* tokens = nullptr;
  std::FILE* index = nullptr;
  bool committed = false;
  ~Files() {
    if (tokens != nullptr) std::fclose(tokens);
    if (index != nullptr) std::fclose(index);
    if (committed) return;
    std::remove(tokens_tmp.c_str());
    std::remove(index_tmp.c_str());
  }
};

ExampleWriter::ExampleWriter(std::string prefix)
    : prefix_(std::move(prefix)), files_(std::make_unique<Files>()) {
  files_->tokens_tmp = temporary_name(prefix_ + ".tokens");
  files_->index_tmp = temporary_name(prefix_ + ".index");
  files_->tokens = std::fopen(files_->tokens_tmp.c_str(), "wb");
  if (files_->tokens == nullptr) {
    throw RuntimeFailure("cannot create '" + files_->tokens_tmp + "': " + std::strerror(errno));
  }
  files_->index = std::fopen(files_->index_tmp.c_str(), "wb");
  if (files_->index == nullptr) {
    throw RuntimeFailure("cannot create '" + files_->index_tmp + "': " + std::strerror(errno));
  }
  const std::vector<unsigned char> header(kHeaderBytes, 0);  // written again by finish()
  write_all(files_->index, header.data(), header.size(), files_->index_tmp);
}

ExampleWriter::~ExampleWriter() = default;

void ExampleWriter::add(const std::vector<int32_t>& ids, const std::vector<uint8_t>& loss) {
  if (ids.size() != loss.size()) throw InternalError("ExampleWriter::add: ids and loss differ");
  std::vector<uint32_t> words(ids.size());
  uint32_t counted = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const bool target = i > 0 && (loss[i] == 1 || loss[i] == kSharedPromptMark);
    const bool side = i > 0 && (loss[i] == kSideStartMark || loss[i] == kSharedPromptMark);
    if (ids[i] < 0 || ids[i] > kMaxId) {
      throw InputError("token id " + std::to_string(ids[i]) + " is outside [0, 2^30) (" + prefix_ +
                       ")");
    }
    words[i] = static_cast<uint32_t>(ids[i]) | (target ? kLossBit : 0u) | (side ? kSideBit : 0u);
    counted += target && !side ? 1 : 0;
  }
  write_all(files_->tokens, words.data(), words.size() * 4, files_->tokens_tmp);
  std::vector<unsigned char> e;
  put<uint64_t>(&e, static_cast<uint64_t>(tokens_));
  put<uint32_t>(&e, static_cast<uint32_t>(ids.size()));
  put<uint32_t>(&e, counted);
  write_all(files_->index, e.data(), e.size(), files_->index_tmp);
  ++examples_;
  tokens_ += static_cast<int64_t>(ids.size());
  loss_tokens_ += counted;
}

void ExampleWriter::finish() {
  std::vector<unsigned char> h;
  put<uint64_t>(&h, kIndexMagic);
  put<uint64_t>(&h, kIndexVersion);
  put<uint64_t>(&h, static_cast<uint64_t>(examples_));
  put<uint64_t>(&h, static_cast<uint64_t>(tokens_));
  if (std::fseek(files_->index, 0, SEEK_SET) != 0) {
    throw RuntimeFailure("cannot write '" + files_->index_tmp + "': " + std::strerror(errno));
  }
  write_all(files_->index, h.data(), h.size(), files_->index_tmp);
  for (std::FILE** f : {&files_->tokens, &files_->index}) {
    const bool ok = std::fflush(*f) == 0;
    std::fclose(*f);
    *f = nullptr;
    if (!ok) throw RuntimeFailure("cannot write '" + prefix_ + "': " + std::strerror(errno));
  }
  fsync_path(files_->tokens_tmp, FsyncTarget::file);
  fsync_path(files_->index_tmp, FsyncTarget::file);
  commit_file(files_->tokens_tmp, prefix_ + ".tokens");
  commit_file(files_->index_tmp, prefix_ + ".index");
  files_->committed = true;
}

ExampleFile::ExampleFile(const std::string& prefix) : prefix_(prefix) {
  const std::string index = prefix + ".index", tokens = prefix + ".tokens";
  FileDescriptor fd;
  struct stat st {};
  if (auto why = open_regular_file(&fd, index, &st)) {
    throw RuntimeFailure("example cache '" + index + "': " + *why);
  }
  if (st.st_size < kHeaderBytes) throw RuntimeFailure("example cache '" + index + "' is truncated");
  map_bytes_ = static_cast<std::size_t>(st.st_size);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw RuntimeFailure("cannot map '" + index + "': " + std::strerror(errno));
  }
  const auto* p = static_cast<const unsigned char*>(map_);
  n_ = static_cast<int64_t>(get<uint64_t>(p + 16));
  tokens_ = static_cast<int64_t>(get<uint64_t>(p + 24));
  if (get<uint64_t>(p) != kIndexMagic || get<uint64_t>(p + 8) != kIndexVersion ||
      static_cast<uint64_t>(st.st_size) != kHeaderBytes + kEntryBytes * static_cast<uint64_t>(n_)) {
    throw RuntimeFailure("example cache '" + index +
                         "' is not a kktrain example index of version " +
                         std::to_string(kIndexVersion) + " or is truncated");
  }
  struct stat ts {};
  if (auto why = open_regular_file(&tokens_fd_, tokens, &ts)) {
    throw RuntimeFailure("example cache '" + tokens + "': " + *why);
  }
  if (ts.st_size != tokens_ * 4) {
    throw RuntimeFailure("example cache '" + tokens + "' holds " + std::to_string(ts.st_size) +
                         " bytes; its index says " + std::to_string(tokens_ * 4));
  }
}

ExampleFile::~ExampleFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

const unsigned char* ExampleFile::entry(int64_t i) const {
  if (i < 0 || i >= n_) throw InternalError("example index out of range");
  return static_cast<const unsigned char*>(map_) + kHeaderBytes + kEntryBytes * i;
}

int64_t ExampleFile::length(int64_t i) const {
  return get<uint32_t>(entry(i) + 8);
}

int64_t ExampleFile::loss_tokens(int64_t i) const {
  return get<uint32_t>(entry(i) + 12);
}

void ExampleFile::read(int64_t i, int32_t* ids, uint8_t* loss) const {
  const unsigned char* e = entry(i);
  const int64_t first = static_cast<int64_t>(get<uint64_t>(e));
  const int64_t n = get<uint32_t>(e + 8);
  std::vector<uint32_t> words(static_cast<std::size_t>(n));
  const std::size_t bytes = words.size() * 4;
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(tokens_fd_.get(), reinterpret_cast<char*>(words.data()) + done,
                              bytes - done, static_cast<off_t>(first * 4 + done));
    if (r <= 0) {
      throw RuntimeFailure(
          "cannot read example " + std::to_string(i) + " of '" + prefix_ + ".tokens': " +
          (r == 0 ? "the file is shorter than its index says" : std::strerror(errno)));
    }
    done += static_cast<std::size_t>(r);
  }
  for (int64_t k = 0; k < n; ++k) {
    ids[k] = static_cast<int32_t>(words[k] & ~(kLossBit | kSideBit));
    const bool target = (words[k] & kLossBit) != 0, side = (words[k] & kSideBit) != 0;
    loss[k] = target && side ? kSharedPromptMark : target ? 1 : side ? kSideStartMark : 0;
  }
}

int64_t epoch_position(uint64_t seed, int64_t epoch, int64_t n, int64_t k) {
  if (n <= 1) return k;
  // A balanced Feistel network over 2^(2h) >= n values, cycle-walking back into [0, n).
  int h = 1;
  while ((int64_t(1) << (2 * h)) < n) ++h;
  const uint64_t mask = (uint64_t(1) << h) - 1;
  uint64_t x = static_cast<uint64_t>(k);
  do {
    uint64_t l = x >> h, r = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f =
          hash3(seed, kPermutationStream ^ (static_cast<uint64_t>(epoch) << 8), (round << 56) ^ r) &
          mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << h) | r;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

RowPacker::RowPacker(const ExampleFile& file, Packing packing, int64_t T, uint64_t seed,
                     int64_t epoch, bool shuffled)
    : file_(file), packing_(packing), T_(T), seed_(seed), epoch_(epoch), shuffled_(shuffled) {}

int64_t RowPacker::example_at(int64_t k) const {
  return shuffled_ ? epoch_position(seed_, epoch_, file_.size(), k) : k;
}

bool RowPacker::next(std::vector<int64_t>* row) {
  row->clear();
  const int64_t n = file_.size();
  if (packing_ == Packing::one_per_row) {
    if (next_ >= n) return false;
    row->push_back(example_at(next_++));
    ++rows_;
    return true;
  }
  while (static_cast<int64_t>(open_.size()) <= kOpenRows && next_ < n) {
    const int64_t e = example_at(next_++);
    const int64_t len = file_.length(e);
    auto fit =
        std::find_if(open_.begin(), open_.end(), [&](const Open& o) { return o.used + len <= T_; });
    if (fit == open_.end()) fit = open_.insert(open_.end(), Open{});
    fit->used += len;
    fit->examples.push_back(e);
  }
  if (open_.empty()) return false;
  *row = std::move(open_.front().examples);
  open_.erase(open_.begin());
  ++rows_;
  return true;
}

// The rows of one split, packed once in file order (Packing::first_fit), or one example a row
// (no memory: row r is example r).
struct PackedRows {
  int64_t count = 0;
  std::vector<uint32_t> begin;     // first_fit: row r holds examples[begin[r], begin[r + 1])
  std::vector<uint32_t> examples;  // the examples' indices, row after row

  PackedRows(const ExampleFile& file, Packing packing, int64_t T) {
    if (packing == Packing::one_per_row) {
      count = file.size();
      return;
    }
    if (file.size() > int64_t(UINT32_MAX)) {
      throw RuntimeFailure("example cache '" + file.prefix() + "' holds " +
                           std::to_string(file.size()) + " examples; packing takes at most " +
                           std::to_string(UINT32_MAX));
    }
    RowPacker p(file, packing, T, 0, 0, /*shuffled=*/false);
    std::vector<int64_t> row;
    begin.push_back(0);
    while (p.next(&row)) {
      for (int64_t e : row) examples.push_back(static_cast<uint32_t>(e));
      begin.push_back(static_cast<uint32_t>(examples.size()));
    }
    count = p.rows_made();
  }
  void row(int64_t r, std::vector<int64_t>* out) const {
    out->clear();
    if (begin.empty()) {
      out->push_back(r);
      return;
    }
    for (uint32_t k = begin[static_cast<std::size_t>(r)];
         k < begin[static_cast<std::size_t>(r) + 1]; ++k) {
      out->push_back(examples[k]);
    }
  }
};

struct ExampleData::State {
  std::unique_ptr<ExampleFile> train, val;
  std::unique_ptr<PackedRows> train_rows, val_rows;
  Packing packing = Packing::one_per_row;
  int64_t T = 0, G = 0;
  int64_t epoch_steps = 0;  // every epoch's: ceil(rows / G)
  uint64_t seed = 0;
  std::string dir;
  // The rows of the last step drawn (every micro-batch of a step reads them).
  mutable int64_t step_cached = -1;
  mutable std::vector<std::vector<int64_t>> step_rows;
  mutable int64_t step_loss_tokens = 0;
  mutable int64_t step_examples = 0;

  // Fills step_rows with the G rows of `step` (empty rows past the epoch's end).
  void draw_step(int64_t step) const {
    if (step_cached == step) return;
    const int64_t e = step / epoch_steps, s = step % epoch_steps;
    const int64_t R = train_rows->count;
    step_rows.assign(static_cast<std::size_t>(G), {});
    step_loss_tokens = 0;
    step_examples = 0;
    for (int64_t k = 0; k < G && s * G + k < R; ++k) {
      std::vector<int64_t>& row = step_rows[static_cast<std::size_t>(k)];
      train_rows->row(epoch_position(seed, e, R, s * G + k), &row);
      for (int64_t ex : row) step_loss_tokens += train->loss_tokens(ex);
      step_examples += static_cast<int64_t>(row.size());
    }
    step_cached = step;
  }
};

namespace {

// Row b of `batch` from `examples` of `file`, as the header describes.
// Row b of `batch` from `examples` of `file`; a preference pair's sides each start a sequence
// of their own, and the pair is listed in batch->pairs.
void fill_row(Batch* batch, int64_t b, const ExampleFile& file,
              const std::vector<int64_t>& examples) {
  const int64_t T = batch->T;
  int32_t* ids = batch->ids.data() + b * T;
  int32_t* targets = batch->targets.data() + b * T;
  int32_t* starts = batch->starts.data() + b * T;
  std::vector<int32_t> e_ids;
  std::vector<uint8_t> e_loss;
  int64_t p = 0;
  for (int64_t ex : examples) {
    const int64_t n = file.length(ex);
    if (p + n > T) throw InternalError("a packed row overflows seq_len");
    e_ids.resize(static_cast<std::size_t>(n));
    e_loss.resize(static_cast<std::size_t>(n));
    file.read(ex, e_ids.data(), e_loss.data());
    // a pair: its chosen side's own tokens from `own` (after a shared prompt; p without one), its
    // rejected side from `side`
    int64_t start = p, side = -1, own = p;
    for (int64_t i = 0; i < n; ++i) {
      if (e_loss[i] == kSharedPromptMark) own = p + i;
      if (e_loss[i] == kSideStartMark) {
        side = p + i;
        if (own == p) start = side;  // no shared prompt: a sequence of its own
      }
      if (side >= 0 && own > p) {  // after a shared prompt: it sees the prompt, not the chosen
        if (batch->gaps.empty()) batch->gaps.assign(static_cast<size_t>(2 * batch->B * T), 0);
        int32_t* g = batch->gaps.data() + 2 * (b * T + p + i);
        g[0] = static_cast<int32_t>(own);
        g[1] = static_cast<int32_t>(side);
      }
      ids[p + i] = e_ids[i];
      targets[p + i] = i + 1 < n && e_loss[i + 1] == 1 ? e_ids[i + 1] : -1;
      starts[p + i] = static_cast<int32_t>(start);
    }
    if (side >= 0) {
      batch->pairs.push_back(BatchPair{ex, static_cast<int32_t>(b), static_cast<int32_t>(own),
                                       static_cast<int32_t>(side), static_cast<int32_t>(p + n)});
    }
    p += n;
  }
  for (int64_t i = p; i < T; ++i) {
    ids[i] = 0;
    targets[i] = -1;
    starts[i] = static_cast<int32_t>(p);
  }
}

Batch empty_batch(int64_t B, int64_t T) {
  Batch b;
  b.B = B;
  b.T = T;
  b.ids.assign(static_cast<std::size_t>(B * T), 0);
  b.targets.assign(static_cast<std::size_t>(B * T), -1);
  b.starts.assign(static_cast<std::size_t>(B * T), 0);
  return b;
}

}  // namespace

ExampleData::ExampleData(const std::string& dir, const DataConfig& cfg)
    : s_(std::make_unique<State>()) {
  s_->dir = dir;
  s_->train = std::make_unique<ExampleFile>(dir + "/train");
  struct stat st {};
  if (::stat((dir + "/val.index").c_str(), &st) == 0) {
    s_->val = std::make_unique<ExampleFile>(dir + "/val");
  }
  s_->packing = cfg.packing ? Packing::first_fit : Packing::one_per_row;
  s_->T = cfg.seq_len;
  s_->G = cfg.global_batch_size;
  s_->seed = cfg.seed;
  if (s_->train->size() == 0) {
    throw InputError("data.path: no training examples (every example was dropped or held out)");
  }
  s_->train_rows = std::make_unique<PackedRows>(*s_->train, s_->packing, s_->T);
  if (s_->val) s_->val_rows = std::make_unique<PackedRows>(*s_->val, s_->packing, s_->T);
  s_->epoch_steps = (s_->train_rows->count + s_->G - 1) / s_->G;
}

ExampleData::~ExampleData() = default;
ExampleData::ExampleData(ExampleData&&) noexcept = default;

int64_t ExampleData::train_examples() const {
  return s_->train->size();
}
int64_t ExampleData::val_examples() const {
  return s_->val ? s_->val->size() : 0;
}
int64_t ExampleData::steps_in_epoch(int64_t /*epoch*/) const {
  return s_->epoch_steps;
}
int64_t ExampleData::steps_for_epochs(int64_t epochs) const {
  if (epochs > INT64_MAX / s_->epoch_steps) return -1;
  return epochs * s_->epoch_steps;
}

void ExampleData::locate(int64_t step, int64_t* epoch, int64_t* step_in_epoch) const {
  *epoch = step / s_->epoch_steps;
  *step_in_epoch = step % s_->epoch_steps;
}

Batch ExampleData::train_batch(int64_t step, int64_t first, int64_t B) const {
  s_->draw_step(step);
  Batch b = empty_batch(B, s_->T);
  for (int64_t k = 0; k < B; ++k) {
    fill_row(&b, k, *s_->train, s_->step_rows.at(static_cast<std::size_t>(first + k)));
  }
  b.loss_tokens = s_->step_loss_tokens;
  b.step_examples = s_->step_examples;
  return b;
}

int64_t ExampleData::val_row_count() const {
  return s_->val ? s_->val_rows->count : 0;
}

Batch ExampleData::val_rows(int64_t first, int64_t count, int64_t B) const {
  return split_rows(Split::val, first, count, B);
}

int64_t ExampleData::split_row_count(Split split) const {
  return split == Split::train ? s_->train_rows->count : val_row_count();
}

Batch ExampleData::split_rows(Split split, int64_t first, int64_t count, int64_t B) const {
  Batch b = empty_batch(B, s_->T);
  const ExampleFile* file = split == Split::train ? s_->train.get() : s_->val.get();
  const PackedRows* rows = split == Split::train ? s_->train_rows.get() : s_->val_rows.get();
  if (!file || count <= 0) return b;
  std::vector<int64_t> row;
  for (int64_t r = first; r < first + count && r < rows->count; ++r) {
    rows->row(r, &row);
    fill_row(&b, r - first, *file, row);
  }
  return b;
}

std::string ExampleData::source() const {
  return s_->dir;
}

}  // namespace kktrain
