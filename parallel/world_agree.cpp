#include "parallel/world_agree.hpp"

#include <mpi.h>

#include <chrono>
#include <thread>

#include "core/strings.hpp"
#include "parallel/agree.hpp"

namespace kktrain {

namespace {

// Waits for `req` at most failed_rank_wait() seconds, polling (then sleeping 200 us a poll).
bool wait_bounded(MPI_Request* req) {
  const double t0 = now_s();
  for (int polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (now_s() - t0 > failed_rank_wait()) return false;  // abandoned with its communicator
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

MPI_Comm config_comm() {
  static MPI_Comm comm = MPI_COMM_NULL;
  static bool made = false;
  if (!made) {
    made = true;
    MPI_Request req;
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
    if (wait_bounded(&req)) comm = dup;
  }
  return comm;
}

}  // namespace

void world_rank_size(int* rank, int* size) {
  int active = 0, finalized = 0;
  MPI_Initialized(&active);
  MPI_Finalized(&finalized);
  *rank = 0;
  *size = 1;
  if (!active || finalized) return;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
}

bool world_reduce_bounded(int* v, WorldReduce op) {
  static bool broken = false;
  const MPI_Comm c = broken ? MPI_COMM_NULL : config_comm();
  if (c == MPI_COMM_NULL) return false;
  int out = *v;
  MPI_Request req;
  MPI_Iallreduce(v, &out, 1, MPI_INT, op == WorldReduce::min ? MPI_MIN : MPI_MAX, c, &req);
  if (!wait_bounded(&req)) {
    broken = true;
    return false;
  }
  *v = out;
  return true;
}

}  // namespace kktrain
