// The last resort of parallel/agree.hpp: rank 1 fails inside a collective step while the other
// ranks wait in a collective rank 1 will never join (a barrier on a communicator of their own,
// standing in for a library's internal collective). Rank 1 must print its message and abort the
// job after distributed.failed_rank_wait_s (here 2 s; argv[1] overrides) instead of hanging.
// test_run_safety.py (case stuck_peer) runs it under mpirun and checks the exit, the message
// and the time.
#include <mpi.h>

#include <cstdlib>

#include "core/errors.hpp"
#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"

using namespace kktrain;

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  auto comm = mpi.make_communicator();
  set_failed_rank_wait(argc > 1 ? std::atof(argv[1]) : 2.0);
  MPI_Comm library;
  MPI_Comm_dup(MPI_COMM_WORLD, &library);
  if (comm->rank() == 1) {
    collectively(*comm, [] { throw RuntimeFailure("rank 1 cannot write its shard (injected)"); });
  } else {
    MPI_Barrier(library);  // never completes: rank 1 is not coming
  }
  return 0;
}
