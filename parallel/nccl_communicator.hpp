// Factory for the NCCL communicator; available when KKTRAIN_HAVE_NCCL is defined.
#pragma once

#include <memory>

#include "parallel/communicator.hpp"

namespace kktrain {
// Requires MPI to be initialized (the NCCL unique id is broadcast over MPI_COMM_WORLD).
std::unique_ptr<Communicator> make_nccl_communicator();
}  // namespace kktrain
