// Helpers shared by the kernel tests: host vectors into device buffers at an element offset (so a
// test can place arrays 2 bytes off their 4-byte alignment) and back.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kokkos_compat.hpp"

namespace kktrain {
namespace testing_util {

// A device buffer of h.size() + 2 elements holding h from element `off` on.
template <class T>
DView<T> upload(const std::vector<T>& h, int64_t off) {
  DView<T> d("buf", h.size() + 2);
  auto m = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < h.size(); ++i) m(off + static_cast<int64_t>(i)) = h[i];
  Kokkos::deep_copy(d, m);
  return d;
}

// Elements [off, off + n) of a device buffer.
template <class T>
std::vector<T> download(const DView<T>& d, int64_t off, std::size_t n) {
  auto m = Kokkos::create_mirror_view(d);
  Kokkos::deep_copy(m, d);
  std::vector<T> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = m(off + static_cast<int64_t>(i));
  return h;
}

}  // namespace testing_util
}  // namespace kktrain
