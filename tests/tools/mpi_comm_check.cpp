// Checks the MPI communicator under mpirun (ctest runs it with -np 2 and -np 3): in-place float
// sums, host sums, agreement, and that a process not started by a launcher gets the
// single-rank communicator. Exits non-zero on any mismatch, naming it.
#include <cmath>
#include <cstdio>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "parallel/communicator.hpp"

using namespace kktrain;

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  Kokkos::ScopeGuard kokkos(argc, argv);  // after MPI, finalized before it
  auto comm = mpi.make_communicator();
  const int r = comm->rank(), w = comm->size();
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "rank %d/%d: %s\n", r, w, what);
      ++failures;
    }
  };
  expect(mpi.active() == launched_by_mpi(), "MPI initialized exactly when launched by mpirun");
  expect(w == mpi.size() && r == mpi.rank(), "communicator agrees with the runtime");
  if (mpi.active()) expect(w > 1 ? comm->name() == "mpi" : comm->name() == "single", "kind");
  // 1000 floats: element i on rank k is i + k; the sum is w * i + w (w - 1) / 2, exact in fp32.
  // The communicator's buffers are device memory: fill and read them through a host copy.
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i + r);
  {
    DView<float> dv("v", v.size());
    Kokkos::deep_copy(dv, HViewU<float>(v.data(), v.size()));
    comm->allreduce_sum(dv);
    Kokkos::deep_copy(HViewU<float>(v.data(), v.size()), dv);
  }
  bool ok = true;
  for (std::size_t i = 0; i < v.size(); ++i) {
    ok = ok && v[i] == static_cast<float>(w * i + w * (w - 1) / 2);
  }
  expect(ok, "allreduce_sum");
  expect(comm->allreduce_sum_host(0.5 + r) == 0.5 * w + w * (w - 1) / 2.0, "allreduce_sum_host");
  expect(comm->all_agree(true), "all_agree(true)");
  expect(w == 1 ? !comm->all_agree(false) : !comm->all_agree(r != w - 1), "all_agree(one false)");
  comm->barrier();
  if (r == 0 && failures == 0) std::printf("ok: %d ranks\n", w);
  return failures == 0 ? 0 : 1;
}
