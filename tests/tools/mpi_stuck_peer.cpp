// The last resort of parallel/agree.hpp: rank 1 fails inside a collective step while the other
// ranks wait in a collective rank 1 will never join (a barrier on a communicator of their own,
// standing in for a library's internal collective). Rank 1 must print its message and abort the
// job after distributed.failed_rank_wait_s (here 2 s; argv[1] overrides) instead of hanging.
// With argv[2] = "in_flight" the ranks first start a non-blocking reduce-scatter together
// (distributed.nonblocking_collectives: the overlapped backward) and the others then wait for a
// second one rank 1 never starts; rank 1 fails with the first still unwaited.
// test_run_safety.py (case stuck_peer) runs it under mpirun and checks the exit, the message
// and the time.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/errors.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"

using namespace kktrain;

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  auto comm = mpi.make_communicator();
  set_failed_rank_wait(argc > 1 ? std::atof(argv[1]) : 2.0);
  const bool in_flight = argc > 2 && std::strcmp(argv[2], "in_flight") == 0;
  MPI_Comm library;
  MPI_Comm_dup(MPI_COMM_WORLD, &library);
  const std::size_t block = 1024;  // floats per rank
  std::vector<float> send(block * comm->size(), 1.0f), recv(block), recv2(block);
  auto bytes = [](std::vector<float>& v) {
    return DBytesU(reinterpret_cast<char*>(v.data()), v.size() * sizeof(float));
  };
  if (in_flight) {
    comm->set_nonblocking(true);
    comm->reduce_scatter_start(bytes(send), bytes(recv), DType::float32);
  }
  if (comm->rank() == 1) {
    collectively(*comm, [] { throw RuntimeFailure("rank 1 cannot write its shard (injected)"); });
  } else if (in_flight) {
    // never completes: rank 1 does not start it
    comm->wait_collective(comm->reduce_scatter_start(bytes(send), bytes(recv2), DType::float32));
  } else {
    MPI_Barrier(library);  // never completes: rank 1 is not coming
  }
  return 0;
}
