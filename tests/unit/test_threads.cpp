// The BLAS threads a product is worth (core/blas_threads.hpp): one per kBlasWorkPerThread
// multiply-adds, never 0 and never above the process's limit, set on this machine's BLAS.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "core/blas_threads.hpp"

namespace kktrain {
namespace {

TEST(BlasThreads, SmallProductsRunOnOneThread) {
  // Every product of the default model (N 1024 tokens, C 128, F 344, V 256, T 128, D 32): the
  // largest, gate/up (1024 x 688 x 128), is 1.3 x kBlasWorkPerThread.
  for (const auto& s : {std::array<int64_t, 3>{128, 128, 32},
                        {128, 32, 128},
                        {1024, 256, 128},
                        {1024, 128, 128},
                        {1024, 688, 128},
                        {688, 128, 1024},
                        {1024, 128, 344}}) {
    EXPECT_EQ(blas_threads_for_product(s[0], s[1], s[2], 2), 1) << s[0] << "x" << s[1];
  }
  EXPECT_EQ(blas_threads_for_product(0, 5, 5, 8), 1);  // never 0
  EXPECT_EQ(blas_threads_for_product(-1, 5, 5, 8), 1);
}

TEST(BlasThreads, LargeProductsUseUpToTheLimit) {
  const int64_t w = kBlasWorkPerThread;
  EXPECT_EQ(blas_threads_for_product(w, 2, 1, 2), 2);
  EXPECT_EQ(blas_threads_for_product(w, 2, 1, 1), 1);  // never above the limit
  EXPECT_EQ(blas_threads_for_product(w, 3, 1, 8), 3);  // one thread per kBlasWorkPerThread
  EXPECT_EQ(blas_threads_for_product(w, 3, 2, 8), 6);
  EXPECT_EQ(blas_threads_for_product(8192, 8192, 8192, 64), 64);
  EXPECT_EQ(blas_threads_for_product(4096, 4096, 4096, 0), 1);  // a limit below 1 counts as 1
  // A (2048 x 1024) @ (1024 x 1024) projection of a larger model takes 2 threads on 2 cores.
  EXPECT_EQ(blas_threads_for_product(2048, 1024, 1024, 2), 2);
}

TEST(BlasThreads, FitsTheLibraryProductByProduct) {
  // kktrain gets the system BLAS through Kokkos Kernels (libblas.so.3: OpenBLAS on Debian);
  // this test links neither, so it loads it itself.
  dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL);
  if (std::string(blas_threads_library()).empty()) {
    GTEST_SKIP() << "this BLAS has no openblas_set_num_threads";
  }
  set_blas_thread_limit(2, true);
  EXPECT_EQ(blas_thread_limit(), 2);
  EXPECT_EQ(blas_threads_in_use(), 2);
  fit_blas_threads(1024, 688, 128);  // small: one thread
  EXPECT_EQ(blas_threads_in_use(), 1);
  fit_blas_threads(2048, 1024, 1024);  // large: the limit
  EXPECT_EQ(blas_threads_in_use(), 2);
  use_blas_threads(8);  // never above the limit
  EXPECT_EQ(blas_threads_in_use(), 2);
  set_blas_thread_limit(1, true);
  fit_blas_threads(2048, 1024, 1024);
  EXPECT_EQ(blas_threads_in_use(), 1);
  set_blas_thread_limit(2, false);  // the user's count: kept for every product
  fit_blas_threads(128, 128, 32);
  EXPECT_EQ(blas_threads_in_use(), 2);
}

}  // namespace
}  // namespace kktrain
