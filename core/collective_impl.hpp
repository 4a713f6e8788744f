// Who runs a multi-rank MPI job's buffer reductions (distributed.collectives): kktrain's own
// reduce-scatter and all-reduce over point-to-point MPI (parallel/ring_collectives.hpp), the MPI
// library's collectives, or `automatic`, the documented rule in that header. A choice fixed at
// launch; the NCCL and single-rank communicators ignore it.
#pragma once

#include <cstdint>

namespace kktrain {

enum class CollectiveImpl : uint8_t { automatic, kktrain, mpi };

// "auto", "kktrain", "mpi": the config values.
inline const char* collective_impl_name(CollectiveImpl c) {
  switch (c) {
    case CollectiveImpl::kktrain:
      return "kktrain";
    case CollectiveImpl::mpi:
      return "mpi";
    case CollectiveImpl::automatic:
      break;
  }
  return "auto";
}

}  // namespace kktrain
