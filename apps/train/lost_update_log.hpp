// What training shows of updates lost to bf16 rounding (optim/lost_updates.hpp): the columns of a
// metrics.jsonl step row and the text of the log line.
#pragma once

#include <string>

#include "io/metrics.hpp"
#include "optim/lost_updates.hpp"

namespace kktrain {

// update_lost_frac, ema_lost_frac, sr_unchanged_frac, master_held_frac, and per dtype group
// "update_groups": {"bfloat16": {"elements", "rounding", "unchanged_frac",
// "<moment>_lost_frac"...}, ...} (docs/cli.md, metrics.jsonl).
void add_lost_update_columns(JsonLine& row, const LostUpdates& l);

// " | update_lost 41.2%" where parameters can lose updates, " | ema_lost 3.1%" where moments are
// bf16; "" when neither.
std::string lost_update_text(const LostUpdates& l);

}  // namespace kktrain
