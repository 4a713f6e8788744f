// The documents of `kktrain tokenize`'s input files, read in batches of bounded size.
//
// A text file is one document (read whole: that is the document). A `.jsonl` file gives one
// document per line: the string at `key` of the JSON object on that line; a line of only
// whitespace is skipped. Every document is checked to be valid UTF-8.
//
// Errors (InputError, one line): an input that is missing, unreadable or not a regular file
// (check_inputs, before anything is written); invalid UTF-8 ("FILE: invalid UTF-8 at byte N");
// a .jsonl line that is not a JSON object, nests deeper than 128 arrays and objects, lacks the
// key, whose value is not a string, or that is longer than DocumentLimits::max_jsonl_line_bytes
// ("FILE:LINE: ..."; the long line is refused once that much of it is read, never held whole).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace kktrain {

struct InputDocument {
  std::string text;
};

// Checks that every input can be read as a regular file; returns their total size in bytes.
// InputError naming the first one that cannot (missing, a directory, unreadable, a FIFO).
int64_t check_inputs(const std::vector<std::string>& inputs);

// Bounds on what one document may cost before it is encoded.
struct DocumentLimits {
  // A .jsonl line (one document and its JSON): 64 MiB. Encoding holds about 30 bytes a byte of
  // text, so such a line costs about 2 GB; web-text corpora's documents are under 1 MiB.
  int64_t max_jsonl_line_bytes = int64_t(64) << 20;
};

class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> inputs, std::string jsonl_key,
                 DocumentLimits limits = {});
  ~DocumentReader();
  DocumentReader(const DocumentReader&) = delete;
  DocumentReader& operator=(const DocumentReader&) = delete;

  // Replaces *batch with the next documents, in input order: at least one, then more while their
  // text stays under max_bytes. Returns false (and an empty batch) when the inputs are done.
  bool next_batch(std::vector<InputDocument>* batch, int64_t max_bytes);
  int64_t bytes_read() const { return bytes_read_; }  // input bytes consumed so far
  int64_t files_done() const { return next_input_; }  // inputs opened so far

 private:
  std::vector<std::string> inputs_;
  std::string key_;
  DocumentLimits limits_;
  std::size_t next_input_ = 0;
  // The .jsonl file being read, its name, line number and the offset of the next line.
  struct Jsonl;
  std::unique_ptr<Jsonl> jsonl_;
  int64_t bytes_read_ = 0;

  // The next document into *doc; false when the inputs are done.
  bool next_document(InputDocument* doc);
  bool next_jsonl_line(InputDocument* doc);  // false at the end of the current .jsonl
};

}  // namespace kktrain
