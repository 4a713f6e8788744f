// The documents of `kktrain tokenize`'s inputs (apps/dataprep/tokenize_inputs.hpp).
#include "apps/dataprep/tokenize_inputs.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/json_text.hpp"
#include "core/strings.hpp"
#include "text/tokenizer.hpp"

namespace kktrain {

namespace {

bool is_jsonl(const std::string& path) {
  return ends_with(path, ".jsonl");
}

[[noreturn]] void unreadable(const std::string& path, const std::string& why) {
  throw InputError("input '" + path + "' " +
                   (why.rfind("is ", 0) == 0 ? why : "cannot be read: " + why));
}

// InputError naming `where` and the byte offset (from `base`) of the first byte of `s` that is
// not UTF-8.
void check_utf8(const std::string& s, const std::string& where, int64_t base) {
  const int64_t bad = text::first_invalid_utf8(s);
  if (bad < 0) return;
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02x", static_cast<unsigned char>(s[bad]));
  throw InputError(where + ": invalid UTF-8 at byte " + std::to_string(base + bad) + " (" + hex +
                   "); the input must be UTF-8 text");
}

}  // namespace

int64_t check_inputs(const std::vector<std::string>& inputs) {
  int64_t total = 0;
  for (const auto& path : inputs) {
    FileDescriptor f;
    struct stat st {};
    if (auto why = open_regular_file(&f, path, &st)) unreadable(path, *why);
    total += static_cast<int64_t>(st.st_size);
  }
  return total;
}

struct DocumentReader::Jsonl {
  std::string path;
  FILE* file = nullptr;
  int64_t line = 0;    // of the line last read (1-based)
  int64_t offset = 0;  // of the next line in the file
  std::vector<char> buf = std::vector<char>(std::size_t(1) << 16);  // read ahead of the line
  std::size_t pos = 0, len = 0;  // buf[pos, len) is read and not yet handed out
  ~Jsonl() {
    if (file) std::fclose(file);
  }

  // The next line (its '\n' included when it has one) into *out: false at the end of the file.
  // A line longer than max_bytes is InputError "FILE:LINE: ...", found once max_bytes of it are
  // held: never more.
  bool next_line(std::string* out, int64_t max_bytes) {
    out->clear();
    for (;;) {
      if (pos == len) {
        pos = 0;
        len = std::fread(buf.data(), 1, buf.size(), file);
        if (len == 0) {
          if (std::ferror(file)) unreadable(path, std::strerror(errno ? errno : EIO));
          return !out->empty();
        }
      }
      const char* begin = buf.data() + pos;
      const void* nl = std::memchr(begin, '\n', len - pos);
      const std::size_t take =
          nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - begin) + 1 : len - pos;
      if (static_cast<int64_t>(out->size() + take) > max_bytes) {
        throw InputError("input '" + path + "':" + std::to_string(line + 1) +
                         ": the line is longer than " + byte_count(max_bytes) +
                         ", the limit of a .jsonl document line (split the document)");
      }
      out->append(begin, take);
      pos += take;
      if (nl) return true;
    }
  }
};

DocumentReader::DocumentReader(std::vector<std::string> inputs, std::string jsonl_key,
                               DocumentLimits limits)
    : inputs_(std::move(inputs)), key_(std::move(jsonl_key)), limits_(limits) {}

DocumentReader::~DocumentReader() = default;

bool DocumentReader::next_batch(std::vector<InputDocument>* batch, int64_t max_bytes) {
  batch->clear();
  int64_t bytes = 0;
  InputDocument doc;
  while (bytes < max_bytes && next_document(&doc)) {
    bytes += static_cast<int64_t>(doc.text.size());
    batch->push_back(std::move(doc));
    doc = InputDocument();
  }
  return !batch->empty();
}

bool DocumentReader::next_document(InputDocument* doc) {
  for (;;) {
    if (jsonl_) {
      if (next_jsonl_line(doc)) return true;
      jsonl_.reset();
    }
    if (next_input_ >= inputs_.size()) return false;
    const std::string& path = inputs_[next_input_++];
    if (is_jsonl(path)) {
      FileDescriptor f;
      if (auto why = open_regular_file(&f, path)) unreadable(path, *why);
      jsonl_ = std::make_unique<Jsonl>();
      jsonl_->path = path;
      const int fd = ::dup(f.get());
      jsonl_->file = fd < 0 ? nullptr : ::fdopen(fd, "rb");
      if (!jsonl_->file) {
        if (fd >= 0) ::close(fd);
        unreadable(path, std::strerror(errno));
      }
      continue;
    }
    if (auto why = read_regular_file(&doc->text, path)) unreadable(path, *why);
    check_utf8(doc->text, "input '" + path + "'", 0);
    bytes_read_ += static_cast<int64_t>(doc->text.size());
    return true;
  }
}

bool DocumentReader::next_jsonl_line(InputDocument* doc) {
  Jsonl& j = *jsonl_;
  std::string line;
  for (;;) {
    errno = 0;
    if (!j.next_line(&line, limits_.max_jsonl_line_bytes)) return false;
    const auto n = static_cast<int64_t>(line.size());
    ++j.line;
    const int64_t start = j.offset;
    j.offset += n;
    bytes_read_ += n;
    const std::string where = "input '" + j.path + "':" + std::to_string(j.line);
    check_utf8(line, where, start);
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;  // blank
    nlohmann::json row;
    check_json_nesting(line, where);
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(where + ": not a JSON line (" + e.what() + ")");
    }
    if (!row.is_object()) throw InputError(where + ": not a JSON object");
    const auto it = row.find(key_);
    if (it == row.end()) {
      throw InputError(where + ": no key '" + key_ + "' (--jsonl-key names the text's key)");
    }
    if (!it->is_string()) throw InputError(where + ": '" + key_ + "' is not a string");
    doc->text = it->get<std::string>();
    check_utf8(doc->text, where + " (the '" + key_ + "' string)", 0);
    return true;
  }
}

}  // namespace kktrain
