// Pinned staging for host-to-device uploads (core/upload_staging.hpp has the what and why).
#include "core/upload_staging.hpp"

#include <algorithm>
#include <cstring>

#include "core/host_sync.hpp"

namespace kktrain {

namespace {

constexpr std::size_t kAlignBytes = 64;                           // each upload starts on a line
constexpr std::size_t kFirstBufferBytes = std::size_t(64) << 10;  // then doubling

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
}

}  // namespace

void UploadStaging::forget_drained() {
  if (!allocate_) return;  // a dry run never drains
  const int64_t drains = device_drains();
  if (drains == drains_seen_) return;
  // Every copy queued before the drain has run: all staged bytes are free again.
  for (Buffer& b : buffers_) b.used_bytes = 0;
  current_ = 0;
  drains_seen_ = drains;
}

char* UploadStaging::reserve(std::size_t bytes) {
  forget_drained();
  const std::size_t need = aligned(bytes);
  while (current_ < buffers_.size() &&
         buffers_[current_].used_bytes + need > buffers_[current_].capacity_bytes) {
    ++current_;
  }
  if (current_ == buffers_.size()) {
    const std::size_t in_flight = stats().bytes_in_flight;
    if (in_flight > 0 && in_flight + need > max_staged_bytes_) {
      ++forced_drains_;
      if (allocate_) {
        host_sync();  // rather than hold more pinned memory: wait for the queued copies
        forget_drained();
      } else {  // the dry run's drain
        for (Buffer& f : buffers_) f.used_bytes = 0;
        current_ = 0;
      }
      return reserve(bytes);
    }
    Buffer b;
    const std::size_t last =
        buffers_.empty() ? kFirstBufferBytes / 2 : buffers_.back().capacity_bytes;
    b.capacity_bytes = std::max(need, 2 * last);
    if (allocate_) {
      b.bytes = Kokkos::View<char*, PinnedHostSpace>(
          Kokkos::view_alloc(Kokkos::WithoutInitializing, "upload_staging"), b.capacity_bytes);
    }
    buffers_.push_back(b);
  }
  Buffer& b = buffers_[current_];
  char* at = allocate_ ? b.bytes.data() + b.used_bytes : nullptr;
  b.used_bytes += need;
  return at;
}

void UploadStaging::upload_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  char* staged = reserve(bytes);
  std::memcpy(staged, src, bytes);
  using PinnedBytesU = Kokkos::View<const char*, Kokkos::LayoutRight, PinnedHostSpace,
                                    Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  // With an instance: queued behind the kernels still reading dst, no fence of the device.
  Kokkos::deep_copy(ExecSpace(), DBytesU(static_cast<char*>(dst), bytes),
                    PinnedBytesU(staged, bytes));
}

UploadStaging::Stats UploadStaging::stats() const {
  Stats s;
  s.buffers = static_cast<int64_t>(buffers_.size());
  const bool drained = allocate_ && device_drains() != drains_seen_;
  for (const Buffer& b : buffers_) {
    s.bytes_reserved += b.capacity_bytes;
    if (!drained) s.bytes_in_flight += b.used_bytes;
  }
  s.forced_drains = forced_drains_;
  return s;
}

std::size_t UploadStaging::reserved_bytes_for(const std::vector<std::size_t>& upload_bytes,
                                              int64_t repeats) {
  UploadStaging plan;
  plan.allocate_ = false;
  for (int64_t r = 0; r < repeats; ++r) {
    for (std::size_t bytes : upload_bytes) {
      if (bytes > 0) plan.reserve(bytes);
    }
  }
  return plan.stats().bytes_reserved;
}

}  // namespace kktrain
