// The data loader's window rate: io/data.hpp's TokenDataset over a token file, drawing training
// batches as `kktrain train` does (B windows of T + 1 tokens at positions keyed on the step),
// timed from the first draw (the mapping exists, no page of the file read yet). Driven by
// bench/hf_io_bench.py, which drops the page cache first for a cold run.
//   bench_data FILE VOCAB T B STEPS    -> "windows W seconds S windows_per_s R"
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/bench_util.hpp"
#include "io/data.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: bench_data FILE VOCAB T B STEPS\n");
    return 2;
  }
  kktrain::DataConfig cfg;
  cfg.paths = {argv[1]};
  cfg.seq_len = std::atoll(argv[3]);
  cfg.val_fraction = 0.0;
  const int64_t B = std::atoll(argv[4]), steps = std::atoll(argv[5]);
  try {
    const auto d = kktrain::TokenDataset::load(cfg, std::atoll(argv[2]));
    const double t0 = kktrain::bench::now();
    int64_t sum = 0;
    for (int64_t s = 0; s < steps; ++s) sum += d.train_batch(s, 0, B, cfg.seq_len).ids[0];
    const double t = kktrain::bench::now() - t0;
    std::printf("windows %lld seconds %.6f windows_per_s %.1f (checksum %lld)\n",
                static_cast<long long>(B * steps), t, B * steps / t, static_cast<long long>(sum));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data: %s\n", e.what());
    return 1;
  }
  return 0;
}
