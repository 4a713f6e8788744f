// Expert parallelism's token exchange (docs/moe.md): the experts of a sparse MLP are split over
// the P ranks of an expert-parallel group, expert e held by group rank e / (E / P). Each rank
// routes its own tokens; the rows it sorted by expert (model/moe.hpp) go to the ranks holding
// those experts with one all-to-all in the compute dtype, are regrouped expert-major for the
// grouped GEMMs, and the experts' outputs go back the same way, so the combine (fp32) runs where
// the tokens live. Backward moves the output gradients to the experts and the input gradients
// back with the same plan.
//
//   sorted rows (NK, C), this rank's, by global expert: blocks for peers 0, 1, ... (experts of
//   peer j are contiguous)  --all-to-all-->  peer-major (rows from peer 0: local expert 0, 1, ..;
//   from peer 1: ...)  --permute-->  expert-major (local expert 0: rows from peer 0, 1, ..; ...)
#pragma once

#include <cstdint>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

// One layer's exchange for one micro-batch, from every peer's counts per expert.
struct MoePlan {
  int peers = 1;                     // P
  int64_t experts_per_rank = 0;      // E / P
  std::vector<uint64_t> counts;      // (P, E) rows each peer routes to each expert
  std::vector<int64_t> local_sizes;  // (E / P) rows of each local expert, over all peers
  int64_t recv_rows = 0;             // rows this rank's experts receive (sum of local_sizes)
  DView<int32_t> perm;               // (recv_rows) expert-major row r is peer-major row perm[r]
};

// Fills the plan from this rank's counts (E) over the group `ep` (one small all-gather).
void moe_plan(MoePlan& plan, Communicator& ep, const std::vector<int64_t>& my_counts);

// out (recv_rows, C) expert-major from sorted (NK, C), this rank's rows sorted by expert.
// peer_major is scratch of recv_rows * C elements of T.
template <class T>
void moe_dispatch(const ExecSpace& space, T* out, const T* sorted, const MoePlan& plan,
                  Communicator& ep, int64_t C, T* peer_major);
// The inverse: sorted (NK, C) receives, in this rank's sorted order, the rows its peers' experts
// produced from in (recv_rows, C) expert-major.
template <class T>
void moe_return(const ExecSpace& space, T* sorted, const T* in, const MoePlan& plan,
                Communicator& ep, int64_t C, T* peer_major);

}  // namespace kktrain
