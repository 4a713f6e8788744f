// Device-resident sums read back at one synchronization (core/device_sums.hpp).
#include "core/device_sums.hpp"

namespace kktrain {

DeviceSums::DeviceSums(int slots) : slots_("device_sums", slots), scratch_("device_sum_scratch") {}

void DeviceSums::zero() {
  Kokkos::deep_copy(ExecSpace(), slots_, 0.0);
}

void DeviceSums::zero(int slot) {
  const DView<double> s = slots_;
  Kokkos::parallel_for(
      "device_sums_zero", RangePolicy(0, 1), KOKKOS_LAMBDA(const int64_t) { s(slot) = 0.0; });
}

void DeviceSums::add_scratch(int slot, double count, double then) {
  const DView<double> s = slots_;
  const Kokkos::View<double, MemSpace> r = scratch_;
  Kokkos::parallel_for(
      "device_sums_add", RangePolicy(0, 1),
      KOKKOS_LAMBDA(const int64_t) { s(slot) += count > 0.0 ? r() / count / then : 0.0; });
}

void DeviceSums::add_mean(int slot, const float* x, int64_t n, double count, double then) {
  Kokkos::parallel_reduce(
      "device_sums_reduce", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i, double& acc) { acc += static_cast<double>(x[i]); }, scratch_);
  add_scratch(slot, count, then);
}

void DeviceSums::add_column_mean(int slot, const double* x, int64_t n, int64_t stride,
                                 double count) {
  Kokkos::parallel_reduce(
      "device_sums_column", RangePolicy(0, n),
      KOKKOS_LAMBDA(const int64_t i, double& acc) { acc += x[i * stride]; }, scratch_);
  add_scratch(slot, count);
}

void DeviceSums::add_slot(int to, int from) {
  const DView<double> s = slots_;
  Kokkos::parallel_for(
      "device_sums_add_slot", RangePolicy(0, 1),
      KOKKOS_LAMBDA(const int64_t) { s(to) += s(from); });
}

std::vector<double> DeviceSums::read() const {
  std::vector<double> out(slots_.extent(0));
  // An unmanaged host view over the vector: the copy waits for the kernels before it.
  Kokkos::deep_copy(Kokkos::View<double*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                        out.data(), out.size()),
                    slots_);
  note_device_drained();
  count_host_sync();
  return out;
}

}  // namespace kktrain
