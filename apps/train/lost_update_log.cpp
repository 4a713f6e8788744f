// The metrics columns and log-line text of updates lost to bf16 rounding.
#include "apps/train/lost_update_log.hpp"

#include <cstdio>

namespace kktrain {

void add_lost_update_columns(JsonLine& row, const LostUpdates& l) {
  row.num("update_lost_frac", l.update_lost_frac)
      .num("ema_lost_frac", l.ema_lost_frac)
      .num("sr_unchanged_frac", l.sr_unchanged_frac)
      .num("master_held_frac", l.master_held_frac);
  JsonLine groups;
  for (const LostUpdates::Group& g : l.groups) {
    JsonLine one;
    one.integer("elements", g.elements)
        .str("rounding", param_rounding_name(g.rounding))
        .num("unchanged_frac", g.unchanged_frac);
    for (const auto& [name, frac] : g.moment_lost_frac) one.num(name + "_lost_frac", frac);
    groups.object(dtype_name(g.dtype), one);
  }
  row.object("update_groups", groups);
}

std::string lost_update_text(const LostUpdates& l) {
  std::string t;
  char buf[48];
  if (l.can_lose) {
    std::snprintf(buf, sizeof(buf), " | update_lost %.1f%%", 100.0 * l.update_lost_frac);
    t += buf;
  }
  if (l.bf16_moments) {
    std::snprintf(buf, sizeof(buf), " | ema_lost %.1f%%", 100.0 * l.ema_lost_frac);
    t += buf;
  }
  return t;
}

}  // namespace kktrain
