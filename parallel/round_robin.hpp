// Rows dealt to the ranks in micro-batches, round-robin: the passes over a fixed set of rows
// (validation, preference pairs' reference pass, evaluation) where every rank must run the same
// number of forwards (a sharded model's collectives are inside each one).
//
//   micro-batch m holds rows [m B, (m + 1) B); rank r of W takes micro-batches r, r + W, ...;
//   every rank runs calls() forwards, its j-th on rows [first(j), first(j) + count(j)) (count 0:
//   a padding forward whose targets are all ignored).
#pragma once

#include <algorithm>
#include <cstdint>

namespace kktrain {

struct RoundRobinRows {
  int64_t rows = 0, B = 1, W = 1, rank = 0;

  int64_t calls() const { return (rows + W * B - 1) / (W * B); }
  int64_t first(int64_t j) const { return (j * W + rank) * B; }
  int64_t count(int64_t j) const { return std::clamp<int64_t>(rows - first(j), 0, B); }
  // The rows the ranks have done together after call j.
  int64_t done(int64_t j) const { return std::min(rows, (j + 1) * W * B); }
};

}  // namespace kktrain
