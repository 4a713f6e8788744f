// Expert parallelism's token exchange (model/moe_exchange.hpp).
#include "model/moe_exchange.hpp"

#include <string>

#include "core/bf16.hpp"
#include "core/errors.hpp"
#include "core/host_sync.hpp"

namespace kktrain {

namespace {

// Which exchange a byte matrix is for: the dispatch to the experts' ranks, or the return from them.
enum class Leg { dispatch, back };

// bytes[i * P + j]: what peer i sends peer j (rows for j's experts); transposed for the return.
std::vector<uint64_t> byte_matrix(const MoePlan& plan, uint64_t row_bytes, Leg leg) {
  const bool back = leg == Leg::back;
  const int P = plan.peers;
  const int64_t El = plan.experts_per_rank, E = El * P;
  std::vector<uint64_t> b(static_cast<std::size_t>(P) * P, 0);
  for (int i = 0; i < P; ++i) {
    for (int j = 0; j < P; ++j) {
      uint64_t rows = 0;
      for (int64_t le = 0; le < El; ++le) rows += plan.counts[i * E + j * El + le];
      (back ? b[j * P + i] : b[i * P + j]) = rows * row_bytes;
    }
  }
  return b;
}

template <class T>
DBytesU bytes_of_rows(T* p, int64_t rows, int64_t C) {
  return DBytesU(reinterpret_cast<char*>(p), static_cast<std::size_t>(rows * C) * sizeof(T));
}

}  // namespace

void moe_plan(MoePlan& plan, Communicator& ep, const std::vector<int64_t>& my_counts) {
  const int P = ep.size(), me = ep.rank();
  const int64_t E = static_cast<int64_t>(my_counts.size()), El = E / P;
  if (El * P != E) throw InternalError("moe_plan: experts do not split over the group");
  plan.peers = P;
  plan.experts_per_rank = El;
  plan.counts = ep.allgather_u64(std::vector<uint64_t>(my_counts.begin(), my_counts.end()));
  auto count = [&](int i, int64_t le) {
    return static_cast<int64_t>(plan.counts[i * E + me * El + le]);
  };
  std::vector<int64_t> peer_start(P + 1, 0);  // peer i's rows in the peer-major receive buffer
  for (int i = 0; i < P; ++i) {
    int64_t n = 0;
    for (int64_t le = 0; le < El; ++le) n += count(i, le);
    peer_start[i + 1] = peer_start[i] + n;
  }
  plan.recv_rows = peer_start[P];
  plan.local_sizes.assign(El, 0);
  std::vector<int32_t> perm(plan.recv_rows);
  int64_t r = 0;
  for (int64_t le = 0; le < El; ++le) {
    for (int i = 0; i < P; ++i) {
      int64_t off = peer_start[i];
      for (int64_t k = 0; k < le; ++k) off += count(i, k);
      for (int64_t t = 0; t < count(i, le); ++t) perm[r++] = static_cast<int32_t>(off + t);
      plan.local_sizes[le] += count(i, le);
    }
  }
  if (plan.perm.extent(0) < perm.size()) plan.perm = DView<int32_t>("moe_perm", perm.size());
  if (!perm.empty()) {
    Kokkos::deep_copy(
        Kokkos::subview(plan.perm, std::make_pair<std::size_t, std::size_t>(0, perm.size())),
        HViewU<int32_t>(perm.data(), perm.size()));
  }
}

template <class T>
void moe_dispatch(const ExecSpace& space, T* out, const T* sorted, const MoePlan& plan,
                  Communicator& ep, int64_t C, T* peer_major) {
  const int64_t E = plan.experts_per_rank * plan.peers;
  int64_t sent_rows = 0;  // this rank's NK rows
  for (int64_t e = 0; e < E; ++e) sent_rows += static_cast<int64_t>(plan.counts[ep.rank() * E + e]);
  collective_fence();  // the sorted rows are written by kernels before the library reads them
  ep.alltoallv_bytes(bytes_of_rows(const_cast<T*>(sorted), sent_rows, C),
                     bytes_of_rows(peer_major, plan.recv_rows, C),
                     byte_matrix(plan, static_cast<uint64_t>(C) * sizeof(T), Leg::dispatch));
  const int32_t* perm = plan.perm.data();
  Kokkos::parallel_for(
      "moe_dispatch_permute", RangePolicy(space, 0, plan.recv_rows * C),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t r = i / C, c = i % C;
        out[i] = peer_major[perm[r] * C + c];
      });
}

template <class T>
void moe_return(const ExecSpace& space, T* sorted, const T* in, const MoePlan& plan,
                Communicator& ep, int64_t C, T* peer_major) {
  const int32_t* perm = plan.perm.data();
  Kokkos::parallel_for(
      "moe_return_permute", RangePolicy(space, 0, plan.recv_rows * C),
      KOKKOS_LAMBDA(const int64_t i) {
        const int64_t r = i / C, c = i % C;
        peer_major[perm[r] * C + c] = in[i];
      });
  int64_t back_rows = 0;  // this rank's NK rows
  const int64_t E = plan.experts_per_rank * plan.peers;
  for (int64_t e = 0; e < E; ++e) back_rows += static_cast<int64_t>(plan.counts[ep.rank() * E + e]);
  collective_fence();
  ep.alltoallv_bytes(bytes_of_rows(peer_major, plan.recv_rows, C),
                     bytes_of_rows(sorted, back_rows, C),
                     byte_matrix(plan, static_cast<uint64_t>(C) * sizeof(T), Leg::back));
}

template void moe_dispatch<float>(const ExecSpace&, float*, const float*, const MoePlan&,
                                  Communicator&, int64_t, float*);
template void moe_dispatch<bf16>(const ExecSpace&, bf16*, const bf16*, const MoePlan&,
                                 Communicator&, int64_t, bf16*);
template void moe_return<float>(const ExecSpace&, float*, const float*, const MoePlan&,
                                Communicator&, int64_t, float*);
template void moe_return<bf16>(const ExecSpace&, bf16*, const bf16*, const MoePlan&, Communicator&,
                               int64_t, bf16*);

}  // namespace kktrain
