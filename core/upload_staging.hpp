// Host-to-device uploads the host does not wait for: a micro-batch's token ids, targets and
// their lookup tables, the load-balancing loss's per-expert factors.
//
// CUDA and HIP copy from pageable host memory by staging it into pinned memory first, and the
// driver may wait for the stream before it does: on a GPU every such upload can be a host
// synchronization, one per micro-batch or more. A copy from pinned memory is only queued. The
// host must then leave those pinned bytes alone until the queued copy has run, which it knows
// once the device has drained (host_sync(), the step's scalar readback: device_drains() in
// core/host_sync.hpp). So the staging is a bump allocator over pinned buffers whose space is
// handed out again only after a drain that came after its last use: between two drains (a
// training step of M micro-batches) the buffers grow to what the uploads need, and stay. With
// more than `max_staged_bytes` staged since the last drain it drains the device itself (a
// counted host synchronization) rather than grow further.
//
// On CPU builds the pinned space is ordinary host memory and the copy a memcpy; the same
// bookkeeping runs there, so the tests exercise it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/kokkos_compat.hpp"

namespace kktrain {

#ifdef KOKKOS_HAS_SHARED_HOST_PINNED_SPACE
using PinnedHostSpace = Kokkos::SharedHostPinnedSpace;  // CUDA/HIP: page-locked, DMA-able
#else
using PinnedHostSpace = Kokkos::HostSpace;  // Kokkos 3.4 (host backends only here)
#endif

class UploadStaging {
 public:
  static constexpr std::size_t kDefaultMaxStagedBytes = std::size_t(256) << 20;
  explicit UploadStaging(std::size_t max_staged_bytes = kDefaultMaxStagedBytes)
      : max_staged_bytes_(max_staged_bytes) {}

  // The pinned bytes this staging holds after `repeats` rounds of uploads of the given sizes
  // between two drains (a step's micro-batches): the memory plan's figure, from the same
  // allocation rule (no memory is allocated).
  static std::size_t reserved_bytes_for(const std::vector<std::size_t>& upload_bytes,
                                        int64_t repeats);

  // Queues the copy of n elements from host memory `src` into device memory `dst` on the default
  // execution space's queue (ordered after the kernels issued before it); `src` may be reused as
  // soon as this returns.
  template <class T>
  void upload(T* dst, const T* src, int64_t n) {
    upload_bytes(dst, src, static_cast<std::size_t>(n) * sizeof(T));
  }
  template <class T>
  void upload(const DView<T>& dst, const std::vector<T>& src) {
    if (src.size() > dst.extent(0)) {
      throw InternalError("upload of " + std::to_string(src.size()) + " elements into " +
                          dst.label() + " of " + std::to_string(dst.extent(0)));
    }
    upload(dst.data(), src.data(), static_cast<int64_t>(src.size()));
  }
  void upload_bytes(void* dst, const void* src, std::size_t bytes);

  struct Stats {
    int64_t buffers = 0;              // pinned buffers allocated so far
    std::size_t bytes_reserved = 0;   // their capacity
    std::size_t bytes_in_flight = 0;  // staged since the last drain (may still be read)
    int64_t forced_drains = 0;        // waits this staging did itself (max_staged_bytes reached)
  };
  Stats stats() const;

 private:
  struct Buffer {
    Kokkos::View<char*, PinnedHostSpace> bytes;  // none when only planning
    std::size_t capacity_bytes = 0;
    std::size_t used_bytes = 0;
  };
  // Space of `bytes` staged after everything the queue may still read: the current buffer's
  // rest, a later buffer, or a new one.
  char* reserve(std::size_t bytes);
  void forget_drained();

  bool allocate_ = true;  // false: reserved_bytes_for's dry run (no memory, no drains)
  std::size_t max_staged_bytes_;
  std::vector<Buffer> buffers_;
  std::size_t current_ = 0;   // buffers before it are full since the last drain
  int64_t drains_seen_ = -1;  // device_drains() when the buffers were last known free
  int64_t forced_drains_ = 0;
};

}  // namespace kktrain
