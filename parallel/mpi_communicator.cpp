// MPI implementation of the communicator, and process-level MPI setup.
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "core/errors.hpp"
#include "parallel/communicator.hpp"
#include "parallel/mpi_world.hpp"

namespace kktrain {

MpiWorld::MpiWorld() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

double MpiWorld::allreduce_sum_host(double v) {
  double out = 0.0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return out;
}

bool MpiWorld::all_agree(bool ok) {
  int in = ok ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return out != 0;
}

void MpiWorld::barrier() {
  MPI_Barrier(MPI_COMM_WORLD);
}

namespace {

class MpiCommunicator final : public MpiWorld {
 public:
  std::string name() const override { return "mpi"; }
  void allreduce_sum(float* data, std::size_t n) override {
    // Host-resident buffers on host backends; device builds hand device pointers to a
    // CUDA-aware MPI (or use the NCCL communicator).
    MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
};

}  // namespace

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE",
                        "MPI_LOCALNRANKS", "SLURM_PROCID"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  int already = 0;
  MPI_Initialized(&already);
  if (!already) MPI_Init(argc, argv);
  active_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiRuntime::~MpiRuntime() {
  if (!active_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::unique_ptr<Communicator> MpiRuntime::make_communicator() const {
  if (active_ && size_ > 1) return std::make_unique<MpiCommunicator>();
  return std::make_unique<SingleCommunicator>();
}

}  // namespace kktrain
