#include "model/param_io.hpp"
#include "core/host_sync.hpp"

#include "core/errors.hpp"
#include "ops/kernels.hpp"

namespace kktrain {

namespace {
using HostF = Kokkos::View<float*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// This rank's shard of parameter i (or its gradient) from local_numel host fp32 values.
// Host builds cast straight from the host values; device builds stage them on the device first.
void store_rows(ParamRegistry& reg, int i, const float* local, ParamPart part) {
  const bool grad = part == ParamPart::grad;
  const ParamInfo& p = reg.info(i);
  constexpr bool host = Kokkos::SpaceAccessibility<ExecSpace, HostSpace>::accessible;
  DView<float> tmp;
  const float* src = local;
  if (!host) {
    tmp = DView<float>(Kokkos::ViewAllocateWithoutInitializing("param_from_host"), p.local_numel);
    Kokkos::deep_copy(tmp, HostF(const_cast<float*>(local), p.local_numel));
    src = tmp.data();
  }
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    cast_from_float<T>(ExecSpace(), grad ? reg.grad<T>(i).data() : reg.data<T>(i).data(), src,
                       p.local_numel);
  });
  host_sync();
}
}  // namespace

std::vector<float> param_to_host(const ParamRegistry& reg, int i, ParamPart part) {
  const bool grad = part == ParamPart::grad;
  const ParamInfo& p = reg.info(i);
  DView<float> tmp("param_to_host", p.local_numel);
  dispatch_dtype(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* src = grad ? reg.grad<T>(i).data() : reg.data<T>(i).data();
    cast_to_float<T>(ExecSpace(), tmp.data(), src, p.local_numel, Rounding::fp32);
  });
  std::vector<float> out(static_cast<std::size_t>(p.local_numel));
  Kokkos::deep_copy(HostF(out.data(), out.size()), tmp);
  return out;
}

void param_from_host(ParamRegistry& reg, int i, const std::vector<float>& values, ParamPart part) {
  const ParamInfo& p = reg.info(i);
  if (static_cast<int64_t>(values.size()) != p.numel) {
    throw InputError("parameter " + p.name + " expects " + std::to_string(p.numel) +
                     " values, got " + std::to_string(values.size()));
  }
  // This rank's rows of the full tensor.
  const std::size_t first = static_cast<std::size_t>(p.row_begin * p.row_len);
  store_rows(reg, i, values.data() + first, part);
}

void shard_from_host(ParamRegistry& reg, int i, const std::vector<float>& local) {
  const ParamInfo& p = reg.info(i);
  if (static_cast<int64_t>(local.size()) != p.local_numel) {
    throw InternalError("parameter " + p.name + ": " + std::to_string(local.size()) +
                        " values for a shard of " + std::to_string(p.local_numel));
  }
  store_rows(reg, i, local.data(), ParamPart::values);
}

}  // namespace kktrain
