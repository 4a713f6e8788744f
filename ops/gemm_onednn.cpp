// gemm() through oneDNN's matmul (the 2.x API: matmul::desc, then primitive_desc with attributes).
//
//   op(A), op(B)  memory descriptors with strides: a transposed operand is the same bytes read
//                 column-major, so no copy is made ({k, 1} as is, {1, m} transposed, and so on).
//   alpha         output scale (applied to the product before post-ops);
//   beta          a sum post-op with scale beta (C read in its own dtype, added in fp32); none
//                 when beta == 0, so C is not read (BLAS semantics: NaN in C does not survive).
//   bf16 C        oneDNN rounds the fp32 result to nearest-even once, after scale and sum.
//
// Primitives are cached per (batch, m, n, k, batch strides, transposes, C dtype, alpha, beta,
// threads): the model runs the same few dozen products every step, and creating a primitive costs
// far more than running a small one. The engine and stream are created once.
//
// Threads: Debian's libdnnl runs on OpenMP, which starts one thread per core unless told. Each
// product gets the count the project's thread plan gives a BLAS product of that size
// (core/blas_threads: planned_threads_for_product), set with omp_set_num_threads before the
// primitive is created and run (oneDNN wants both at the same count, hence the count in the cache
// key). omp_set_num_threads is looked up at run time among the loaded libraries (libdnnl pulls in
// libgomp), as OpenBLAS' setter is, so the build needs no OpenMP flags. Without a plan (programs
// that never set one) OpenMP keeps its own count (OMP_NUM_THREADS or one per core).
#include "ops/gemm_onednn.hpp"

#include <dlfcn.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "core/blas_threads.hpp"
#include "core/errors.hpp"

namespace kktrain {
namespace onednn {

namespace {

using dt = dnnl::memory::data_type;

struct Omp {
  void (*set)(int) = nullptr;
  int (*get)() = nullptr;
  Omp() {
    set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
    get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  }
};

const Omp& omp() {
  static const Omp lib;
  return lib;
}

// The thread count for this product under the plan, set in OpenMP when it changes.
int use_threads(int64_t m, int64_t n, int64_t k) {
  static int current = 0;
  const int planned = planned_threads_for_product(m, n, k);
  if (planned > 0 && planned != current && omp().set != nullptr) {
    omp().set(planned);
    current = planned;
  }
  if (planned > 0) return planned;
  return omp().get ? omp().get() : 1;
}

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Context& context() {
  static Context ctx;
  return ctx;
}

struct Key {
  int64_t batch, m, n, k;
  int64_t sa, sb, sc;  // batch strides in elements (batch > 1; 0 otherwise)
  char ta, tb;
  DType ab_dtype, c_dtype;
  float alpha, beta;
  int threads;
  bool operator==(const Key& o) const {
    return batch == o.batch && m == o.m && n == o.n && k == o.k && sa == o.sa && sb == o.sb &&
           sc == o.sc && ta == o.ta && tb == o.tb && ab_dtype == o.ab_dtype &&
           c_dtype == o.c_dtype && std::memcmp(&alpha, &o.alpha, sizeof(float)) == 0 &&
           std::memcmp(&beta, &o.beta, sizeof(float)) == 0 && threads == o.threads;
  }
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    uint32_t a, b;
    std::memcpy(&a, &key.alpha, sizeof(a));
    std::memcpy(&b, &key.beta, sizeof(b));
    std::size_t h = 1469598103934665603ull;
    for (uint64_t v : {uint64_t(key.batch), uint64_t(key.m), uint64_t(key.n), uint64_t(key.k),
                       uint64_t(key.sa), uint64_t(key.sb), uint64_t(key.sc), uint64_t(key.ta),
                       uint64_t(key.tb), uint64_t(key.ab_dtype), uint64_t(key.c_dtype), uint64_t(a),
                       uint64_t(b), uint64_t(key.threads)}) {
      h = (h ^ v) * 1099511628211ull;
    }
    return h;
  }
};

// One cached product: the primitive and its memory objects (data handles set per call).
struct Entry {
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;
  bool native = false;
};

// Cap on cached primitives: the model's layers use ~20 shapes, the tiled attention up to a few
// hundred (each of its ~9 products per key-block width (up to 1024 / 64 = 16 widths), for full and
// partial query tiles and group chunks: 142 measured at T = 3000 with 50 KV heads), all of them
// every step, so the cap must hold them all (a full cache starts over: creating primitives again
// every step would cost far more than running them). A program sweeping shapes starts over.
constexpr std::size_t kMaxCached = 1024;

std::unordered_map<Key, Entry, KeyHash>& cache() {
  static std::unordered_map<Key, Entry, KeyHash> c;
  return c;
}

bool is_reference(const std::string& impl) {
  return impl.compare(0, 3, "ref") == 0 || impl.find("gemm:ref") != std::string::npos;
}

Entry make_entry(const Key& key) {
  const dnnl::memory::dim bt = key.batch, m = key.m, n = key.n, k = key.k;
  // Logical shapes A (m, k), B (k, n), C (m, n); row-major storage of A or A^T, B or B^T. A batch
  // adds a leading dimension with the operand's batch stride.
  using dims = dnnl::memory::dims;
  // `trans` as BLAS spells it: 'N' row-major as stored, otherwise transposed.
  const auto md = [bt](dnnl::memory::dim r, dnnl::memory::dim c, dt type, char trans,
                       dnnl::memory::dim stride) {
    const dims strides = trans != 'N' ? dims{1, r} : dims{c, 1};
    if (bt == 1) return dnnl::memory::desc({r, c}, type, strides);
    return dnnl::memory::desc({bt, r, c}, type, dims{stride, strides[0], strides[1]});
  };
  const dt ab = key.ab_dtype == DType::bfloat16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc a_md = md(m, k, ab, key.ta, key.sa);
  const dnnl::memory::desc b_md = md(k, n, ab, key.tb, key.sb);
  const dnnl::memory::desc c_md =
      md(m, n, key.c_dtype == DType::bfloat16 ? dt::bf16 : dt::f32, 'N', key.sc);
  dnnl::primitive_attr attr;
  if (key.alpha != 1.0f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.0f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  const dnnl::engine& eng = context().engine;
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
  Entry e;
  e.impl = pd.impl_info_str();
  e.native = !is_reference(e.impl);
  e.prim = dnnl::matmul(pd);
  e.a = dnnl::memory(a_md, eng, DNNL_MEMORY_NONE);
  e.b = dnnl::memory(b_md, eng, DNNL_MEMORY_NONE);
  e.c = dnnl::memory(c_md, eng, DNNL_MEMORY_NONE);
  return e;
}

Entry& entry_for(const Key& key) {
  auto& c = cache();
  auto it = c.find(key);
  if (it != c.end()) return it->second;
  if (c.size() >= kMaxCached) c.clear();
  return c.emplace(key, make_entry(key)).first->second;
}

const char* isa_string(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::all:
      return "all";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
  }
  return "unknown";
}

bool isa_has_bf16(dnnl::cpu_isa isa) {
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

Key key_for(int64_t batch, char ta, char tb, float alpha, DType ab_dtype, DType c_dtype, float beta,
            int64_t m, int64_t n, int64_t k, int64_t sa = 0, int64_t sb = 0, int64_t sc = 0) {
  const int threads = use_threads(batch * m, n, k);  // a batch is worth its total work
  if (batch == 1) sa = sb = sc = 0;                  // no batch dimension: strides unused
  return Key{batch, m, n, k, sa, sb, sc, ta, tb, ab_dtype, c_dtype, alpha, beta, threads};
}

// The CPU qualifies (isa_ok) and a 64^3 probe product with `ab` operands gets JIT code.
bool probe_native(bool isa_ok, DType ab) {
  try {
    if (!isa_ok) return false;
    const int64_t s = 64;
    return entry_for(key_for(1, 'N', 'N', 1.0f, ab, DType::float32, 0.0f, s, s, s)).native;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool available() {
  static const bool ok = probe_native(isa_has_bf16(dnnl::get_effective_cpu_isa()), DType::bfloat16);
  return ok;
}

bool fp32_available() {
  static const bool ok = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    const bool avx2 =
        isa != dnnl::cpu_isa::all && isa != dnnl::cpu_isa::sse41 && isa != dnnl::cpu_isa::avx;
    return probe_native(avx2, DType::float32);
  }();
  return ok;
}

std::string isa_name() {
  return isa_string(dnnl::get_effective_cpu_isa());
}

std::string version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

bool gemm(int64_t batch, char transA, char transB, float alpha, const GemmIn& A, const GemmIn& B,
          float beta, const GemmOut& C, int64_t m, int64_t n, int64_t k) {
  if (A.dtype != B.dtype) throw InternalError("onednn::gemm: A and B must have one dtype");
  if (m <= 0 || n <= 0 || k <= 0) return false;  // gemm() handles empty products itself
  Entry& e = entry_for(key_for(batch, transA, transB, alpha, A.dtype, C.dtype, beta, m, n, k,
                               A.stride(), B.stride(), C.stride()));
  if (!e.native) return false;
  e.a.set_data_handle(const_cast<void*>(A.data));
  e.b.set_data_handle(const_cast<void*>(B.data));
  e.c.set_data_handle(C.data);
  dnnl::stream& s = context().stream;
  e.prim.execute(s, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
  s.wait();
  return true;
}

std::string implementation(char transA, char transB, float alpha, DType c_dtype, float beta,
                           int64_t m, int64_t n, int64_t k, DType ab_dtype) {
  return entry_for(key_for(1, transA, transB, alpha, ab_dtype, c_dtype, beta, m, n, k)).impl;
}

int64_t cached_primitives() {
  return static_cast<int64_t>(cache().size());
}

}  // namespace onednn
}  // namespace kktrain
