// Timing helpers shared by the bench programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace kktrain {
namespace bench {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace bench
}  // namespace kktrain
