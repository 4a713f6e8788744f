// Agreement among every MPI rank before kktrain's communicator exists: while the config is read
// (model.init_from's architecture and dtype are read on every rank), the ranks compare outcomes
// over a duplicate of MPI_COMM_WORLD of their own, made on first use. Every wait is bounded by
// failed_rank_wait() (parallel/agree.hpp): ranks that never meet here (an MPMD launch whose
// configs differ) each go on alone after it, and the duplicate is given up for good. Without MPI
// (or on one rank) there is nothing to agree with.
#pragma once

namespace kktrain {

enum class WorldReduce { min, max };

// This process's rank in MPI_COMM_WORLD and the world's size; 0 and 1 without MPI.
void world_rank_size(int* rank, int* size);

// Reduces *v over every rank (min or max) and returns true; false, leaving *v as it was, when
// the ranks did not all arrive within failed_rank_wait().
bool world_reduce_bounded(int* v, WorldReduce op);

}  // namespace kktrain
