// TensorBoard event files: the scalars of a run's metrics rows, for TensorBoard (and W&B's
// sync_tensorboard) to read, written without a protobuf dependency.
//
// A file is a sequence of records, each
//   uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes,
//   `length` bytes of data, uint32 masked CRC-32C of the data,
// where masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (32-bit arithmetic) and CRC-32C is
// the Castagnoli polynomial (reflected 0x82f63b78, initial and final xor 0xffffffff). Each data is
// an `Event` protobuf message:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record holds file_version "brain.Event:2"; every later one a step's summary. Each
// record is flushed as it is written (a crash loses at most the record being written).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace kktrain {

// CRC-32C of n bytes, and the mask event files store.
uint32_t crc32c(const void* data, std::size_t n);
uint32_t masked_crc32c(const void* data, std::size_t n);

// One Event's bytes (the protobuf encoding above). file_version: the first record's; empty: a
// summary of `values` at `step`.
std::string event_bytes(double wall_time, int64_t step, const std::string& file_version,
                        const std::vector<std::pair<std::string, float>>& values);
// A record of `data` (length, its CRC, data, its CRC).
std::string event_record(const std::string& data);

class EventFileWriter {
 public:
  // Creates `dir` (and its parents) when missing and a new file in it,
  // events.out.tfevents.<seconds since the epoch>.<host name> (".N" appended while that name is
  // taken: a resumed run's file never replaces an earlier one), starting with the file_version
  // record. RuntimeFailure naming the file when it cannot be created or written.
  explicit EventFileWriter(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;
  // One Event of `values` at `step`, stamped now, written and flushed.
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);
  const std::string& path() const { return path_; }

 private:
  void put(const std::string& record);
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace kktrain
