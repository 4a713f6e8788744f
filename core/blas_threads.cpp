// The BLAS thread count through OpenBLAS' own API, looked up once with dlsym(RTLD_DEFAULT) among
// the libraries already loaded (Debian: libblas.so.3 pulls in libopenblas.so.0), so there is no
// link-time dependency on OpenBLAS. Single-threaded callers only (the host training loop).
//
// Why kBlasWorkPerThread is 64 Mi multiply-adds (OpenBLAS 0.3.21 pthreads): OpenBLAS splits all
// but tiny products (small attention ones included) evenly among its threads and waits for the
// last. Alone, a second thread gains on the default model's products; beside one busy process,
// whichever thread shares a core with it is descheduled for a time slice, and the product waits,
// so that a small product split over two threads costs many times its single-thread time, and
// the default training run slows the more the smaller the products that are split. 64 Mi
// multiply-adds on one core is longer than a time slice: larger products (a 2048x1024x1024
// projection) still split, small ones no longer gamble on the scheduler. The price is the second
// core's gain when alone; OPENBLAS_NUM_THREADS=N hands every product back to OpenBLAS' own
// choice. The measurements: bench/README.md, "BLAS threads per product".
#include "core/blas_threads.hpp"

#include <dlfcn.h>

#include <algorithm>

namespace kktrain {

namespace {

using SetFn = void (*)(int);
using GetFn = int (*)();

using NameFn = char* (*)();

struct OpenBlas {
  SetFn set = nullptr;
  GetFn get = nullptr;
  NameFn core = nullptr;
  OpenBlas() {
    set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    core = reinterpret_cast<NameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  }
};

const OpenBlas& openblas() {
  static const OpenBlas lib;
  return lib;
}

int g_limit = 0;     // 0: no limit set, leave the library as it started
bool g_fit = false;  // set the count product by product
int g_current = 0;   // what we last told the library; 0: not told yet

}  // namespace

const char* blas_threads_library() {
  return openblas().set ? "OpenBLAS" : "";
}

std::string blas_core_name() {
  const char* name = openblas().core ? openblas().core() : nullptr;
  return name ? name : "";
}

void set_blas_thread_limit(int n, bool fit_to_products) {
  g_limit = std::max(n, 1);
  g_fit = fit_to_products;
  g_current = 0;
  if (openblas().set == nullptr) return;
  openblas().set(g_limit);
  g_current = g_limit;
}

int blas_thread_limit() {
  return g_limit;
}

void use_blas_threads(int n) {
  if (g_limit == 0 || !g_fit) return;
  n = std::min(std::max(n, 1), g_limit);
  if (n == g_current || openblas().set == nullptr) return;
  openblas().set(n);
  g_current = n;
}

int blas_threads_for_product(int64_t m, int64_t n, int64_t k, int limit) {
  const int64_t work = std::max<int64_t>(m, 0) * std::max<int64_t>(n, 0) * std::max<int64_t>(k, 0);
  const int64_t by_size = std::max<int64_t>(1, work / kBlasWorkPerThread);
  return static_cast<int>(std::min<int64_t>(by_size, std::max(limit, 1)));
}

void fit_blas_threads(int64_t m, int64_t n, int64_t k) {
  if (g_limit == 0 || !g_fit) return;
  use_blas_threads(blas_threads_for_product(m, n, k, g_limit));
}

int planned_threads_for_product(int64_t m, int64_t n, int64_t k) {
  if (g_limit == 0) return 0;
  return g_fit ? blas_threads_for_product(m, n, k, g_limit) : g_limit;
}

int blas_threads_in_use() {
  return openblas().get ? openblas().get() : 0;
}

}  // namespace kktrain
