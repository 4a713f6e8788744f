// A rank that stops answering (SIGSTOP: a node frozen by the scheduler) while the others wait for
// it in a collective: after distributed.stuck_peer_wait_s without progress a waiting rank must end
// the job with one line naming the stopped rank, and wait without spinning a core.
//
// usage: mpi_stopped_peer WAIT_S COLLECTIVE [point_to_point]
//   COLLECTIVE: reduce_scatter (kktrain's ring; through the shared window unless point_to_point),
//   allreduce (the ring, then the library's all-gather), allgather, alltoall, barrier, scalar
//   (the library's), agreement (parallel/agree.hpp's collectively: the agreement after a step).
//   Every rank first runs COLLECTIVE 3 times; then the last rank raises SIGSTOP on itself, the
//   others run it again and never complete it. Prints "stopping PID" (the last rank, before it
//   stops) and "waiting PID" (the others) on stderr. agreement_busy: the last rank works alone
//   (sleeps) for 2 * WAIT_S + 1 s instead of stopping, then joins: every rank exits 0.
// test_stopped_peer.py (case collectives) runs it under mpirun and checks the exit, the line,
// the time and the waiting rank's CPU use.
#include <signal.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "parallel/agree.hpp"
#include "parallel/communicator.hpp"
#include "parallel/peer_wait.hpp"

using namespace kktrain;

namespace {

DBytesU bytes(std::vector<float>& v) {
  return DBytesU(reinterpret_cast<char*>(v.data()), v.size() * sizeof(float));
}

void run(Communicator& comm, const std::string& what) {
  const std::size_t block = 100000;  // floats per rank: a few chunks of the ring
  const std::size_t w = static_cast<std::size_t>(comm.size());
  std::vector<float> send(block * w, 1.0f), recv(block * w);
  if (what == "reduce_scatter") {
    std::vector<float> out(block);
    comm.reduce_scatter_sum(bytes(send), bytes(out), DType::float32);
  } else if (what == "allreduce") {
    comm.allreduce_sum(DViewU<float>(send.data(), send.size()));
  } else if (what == "allgather") {
    std::vector<float> one(block);
    comm.allgather_bytes(bytes(one), bytes(recv));
  } else if (what == "alltoall") {
    comm.alltoallv_bytes(bytes(send), bytes(recv),
                         std::vector<uint64_t>(w * w, block * sizeof(float)));
  } else if (what == "barrier") {
    comm.barrier();
  } else if (what == "scalar") {
    comm.allreduce_sum_host(1.0);
  } else if (what == "agreement" || what == "agreement_busy") {
    collectively(comm, [] {});
  } else {
    std::fprintf(stderr, "unknown collective '%s'\n", what.c_str());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  Kokkos::ScopeGuard kokkos(argc, argv);
  if (argc < 3) {
    std::fprintf(stderr, "usage: mpi_stopped_peer WAIT_S COLLECTIVE [point_to_point]\n");
    return 2;
  }
  MpiLimits limits;
  limits.ring_chunk_bytes = 64 << 10;
  limits.ring_slot_bytes = 64 << 10;
  if (argc > 3 && std::strcmp(argv[3], "point_to_point") == 0) {
    limits.ring_transport = RingTransport::point_to_point;
  }
  auto comm = mpi.make_communicator(limits);
  set_stuck_peer_wait(std::atof(argv[1]));
  comm->set_collectives(CollectiveImpl::kktrain);
  const std::string what = argv[2];
  for (int i = 0; i < 3; ++i) run(*comm, what);
  if (comm->rank() == comm->size() - 1 && what == "agreement_busy") {
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * std::atof(argv[1]) + 1));
  } else if (comm->rank() == comm->size() - 1) {
    std::fprintf(stderr, "stopping %d\n", static_cast<int>(::getpid()));
    std::fflush(stderr);
    ::raise(SIGSTOP);
  } else {
    std::fprintf(stderr, "waiting %d\n", static_cast<int>(::getpid()));
    std::fflush(stderr);
  }
  run(*comm, what);  // the last rank: after a SIGCONT only
  return 0;
}
