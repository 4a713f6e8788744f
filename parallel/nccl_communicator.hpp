// Factory for the NCCL communicator; available when KKTRAIN_HAVE_NCCL is defined.
#pragma once

#include <memory>

#include "parallel/communicator.hpp"

namespace kktrain {
// Requires MPI to be initialized (the NCCL unique id is broadcast over MPI_COMM_WORLD).
std::unique_ptr<Communicator> make_nccl_communicator(const MpiLimits& limits);
// The most ranks of MPI_COMM_WORLD that run on one GPU (the same PCI bus id on the same node),
// the same on every rank (collective). NCCL refuses a communicator with two ranks on one GPU
// ("invalid usage"); such a launch (more ranks than GPUs on a node) takes the MPI communicator.
int ranks_on_busiest_gpu();
}  // namespace kktrain
