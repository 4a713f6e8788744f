// Test seams of ops/attention.hpp: process-wide switches tests flip to run both kernels, and
// small tiles, on one build. Included by tests only, never by production code (a run's choices
// come from KKTRAIN_ATTENTION and KKTRAIN_ATTENTION_TILES, docs/cli.md).
#pragma once

#include <cstdint>

#include "ops/attention.hpp"

namespace kktrain {
namespace test_hooks {

// Overrides attention_kernel() from here on.
void set_attention_kernel(AttentionKernel k);
// Replaces the kernels' default tile sizes from here on (0 restores the defaults).
void set_attention_tiles(int64_t q_rows, int64_t k_cols, int64_t groups = 0);

}  // namespace test_hooks
}  // namespace kktrain
