// Prints ops/rope.hpp's inverse frequencies for tests/parity/check_rope.py, one line per
// frequency: the default inv_freq and the scaled one, as the hex of their fp32 bits.
//   rope_inv_freq D THETA [FACTOR LOW HIGH ORIGINAL]   (llama3 scaling when the four are given)
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ops/rope.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 7) {
    std::fprintf(stderr, "usage: rope_inv_freq D THETA [FACTOR LOW HIGH ORIGINAL]\n");
    return 2;
  }
  kktrain::RopeScaling s;
  if (argc == 7) {
    s.rope_type = kktrain::RopeType::llama3;
    s.factor = std::strtod(argv[3], nullptr);
    s.low_freq_factor = std::strtod(argv[4], nullptr);
    s.high_freq_factor = std::strtod(argv[5], nullptr);
    s.original_max_position_embeddings = std::strtoll(argv[6], nullptr, 10);
  }
  const int64_t D = std::strtoll(argv[1], nullptr, 10);
  const double theta = std::strtod(argv[2], nullptr);
  const auto plain = kktrain::rope_inv_freq(D, theta, kktrain::RopeScaling());
  const auto scaled = kktrain::rope_inv_freq(D, theta, s);
  for (std::size_t j = 0; j < plain.size(); ++j) {
    unsigned a, b;
    std::memcpy(&a, &plain[j], 4);
    std::memcpy(&b, &scaled[j], 4);
    std::printf("%08x %08x\n", a, b);
  }
  return 0;
}
