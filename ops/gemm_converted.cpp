// The converted GEMM in panels (ops/gemm_converted.hpp has the what and why).
#include "ops/gemm_converted.hpp"

#include <KokkosBlas3_gemm.hpp>
#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "core/bf16.hpp"
#include "core/blas_threads.hpp"

namespace kktrain {

namespace {

using CMat = Kokkos::View<const float**, Kokkos::LayoutRight, MemSpace,
                          Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using Mat = DMatrixU<float>;

// fp32 scratch for widened operands and bf16 results, grown on demand (one per role), freed
// when Kokkos finalizes (a View outliving Kokkos aborts the program at exit).
float* scratch(int which, int64_t n) {
  static DView<float> bufs[3];
  static const bool hooked = [] {
    Kokkos::push_finalize_hook([] {
      for (DView<float>& b : bufs) b = DView<float>();
    });
    return true;
  }();
  (void)hooked;
  if (static_cast<int64_t>(bufs[which].extent(0)) < n) {
    bufs[which] = DView<float>();
    bufs[which] = DView<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "gemm_scratch"), n);
  }
  return bufs[which].data();
}

enum Role { kRoleA = 0, kRoleB = 1, kRoleC = 2 };

void kk_gemm(const ExecSpace& space, char transA, char transB, float alpha, const float* A,
             int64_t ar, int64_t ac, const float* B, int64_t br, int64_t bc, float beta, float* C,
             int64_t m, int64_t n) {
  const char ta[2] = {transA, '\0'};
  const char tb[2] = {transB, '\0'};
  if (std::is_same<MemSpace, HostSpace>::value) {  // host BLAS: as many threads as it is worth
    fit_blas_threads(m, n, transA == 'N' ? ac : ar);
  }
  // Kokkos Kernels takes the execution-space instance from 4.5 on (KokkosBlas::gemm(space, ...));
  // older releases (Debian's 3.4 has no KOKKOSKERNELS_VERSION) run the product on the default
  // instance, which is the one every caller passes today.
#if defined(KOKKOSKERNELS_VERSION) && KOKKOSKERNELS_VERSION >= 40500
  KokkosBlas::gemm(space, ta, tb, alpha, CMat(A, ar, ac), CMat(B, br, bc), beta, Mat(C, m, n));
#else
  (void)space;
  KokkosBlas::gemm(ta, tb, alpha, CMat(A, ar, ac), CMat(B, br, bc), beta, Mat(C, m, n));
#endif
}

// A window of a row-major matrix (rows x cols of its own, ld elements per row, of dtype).
struct Window {
  const void* data;
  DType dtype;
  int64_t ld;
};

const void* element_at(const void* base, DType dtype, int64_t offset) {
  return static_cast<const char*>(base) + offset * static_cast<int64_t>(dtype_size(dtype));
}

// out (rows x cols, fp32, row-major) = window w, read transposed when `transposed` (out[i][j] =
// w[j][i]); bf16 widened exactly.
template <class S>
void gather_as_f32(const ExecSpace& space, float* out, const S* src, int64_t ld, int64_t rows,
                   int64_t cols, bool transposed) {
  Kokkos::parallel_for(
      "gemm_gather", RangePolicy(space, 0, rows * cols), KOKKOS_LAMBDA(const int64_t e) {
        const int64_t i = e / cols, j = e - i * cols;
        out[e] = load_f32(src, transposed ? j * ld + i : i * ld + j);
      });
}
// `trans` 'T': read transposed, as op(X) = X^T ('N': as stored).
void gather(const ExecSpace& space, float* out, const Window& w, int64_t rows, int64_t cols,
            char trans) {
  const bool transposed = trans == 'T';
  if (w.dtype == DType::float32) {
    gather_as_f32(space, out, static_cast<const float*>(w.data), w.ld, rows, cols, transposed);
  } else {
    gather_as_f32(space, out, static_cast<const bf16*>(w.data), w.ld, rows, cols, transposed);
  }
}

// Window w (rows x cols, ld per row) = in (rows x cols, fp32 contiguous), narrowed for bf16.
template <class D>
void scatter_from_f32(const ExecSpace& space, D* dst, int64_t ld, const float* in, int64_t rows,
                      int64_t cols) {
  Kokkos::parallel_for(
      "gemm_scatter", RangePolicy(space, 0, rows * cols), KOKKOS_LAMBDA(const int64_t e) {
        const int64_t i = e / cols, j = e - i * cols;
        store_as(dst, i * ld + j, in[e]);
      });
}

// One operand of a panel's product, as kk_gemm takes it: fp32, contiguous, with its transpose.
struct Operand {
  const float* data;
  char trans;
  int64_t rows, cols;  // as stored
};

// The panel of op(X) with op rows [r0, r0 + nr) and op columns [c0, c0 + nc). Stored fp32 rows
// that form the panel whole are used in place; other panels are gathered (and widened) into the
// scratch of `role`, with the transposition already applied where the panel is not whole rows.
Operand panel(const ExecSpace& space, const GemmIn& X, char trans, int64_t r0, int64_t nr,
              int64_t c0, int64_t nc, Role role) {
  // Stored coordinates: op(X)[r][c] = X[r][c] ('N') or X[c][r] ('T').
  const int64_t s_row0 = trans == 'N' ? r0 : c0, s_rows = trans == 'N' ? nr : nc;
  const int64_t s_col0 = trans == 'N' ? c0 : r0, s_cols = trans == 'N' ? nc : nr;
  const bool whole_rows = s_col0 == 0 && s_cols == X.cols;
  const Window w{element_at(X.data, X.dtype, s_row0 * X.cols + s_col0), X.dtype, X.cols};
  if (whole_rows && X.dtype == DType::float32) {
    return Operand{static_cast<const float*>(w.data), trans, s_rows, s_cols};
  }
  float* s = scratch(role, nr * nc);
  if (whole_rows) {  // a contiguous block: widened as stored, transposed by the product
    gather(space, s, w, s_rows, s_cols, 'N');
    return Operand{s, trans, s_rows, s_cols};
  }
  gather(space, s, w, nr, nc, trans);
  return Operand{s, 'N', nr, nc};
}

// Panel sizes (rows mp of the result, columns np) whose scratch fits the budget. An operand needs
// scratch when it is bf16 or when its panel is not whole stored rows (an fp32 op(A) panel of
// transposed A, an fp32 op(B) panel of untransposed B); an fp32 C when its panel is not whole rows.
// Shrinking one size can make another operand need scratch, hence the repeat until nothing changes
// (sizes only shrink).
struct Panels {
  int64_t mp, np;
};
Panels panel_sizes(int64_t budget, char transA, char transB, const GemmIn& A, const GemmIn& B,
                   const GemmOut& C, int64_t m, int64_t n, int64_t k) {
  Panels p{m, n};
  for (Panels last{0, 0}; last.mp != p.mp || last.np != p.np;) {
    last = p;
    const bool a_scratch = A.dtype != DType::float32 || (transA == 'T' && p.mp < m);
    const bool b_scratch = B.dtype != DType::float32 || (transB == 'N' && p.np < n);
    if (a_scratch && p.mp * k > budget) p.mp = std::max<int64_t>(1, budget / k);
    if (b_scratch && k * p.np > budget) p.np = std::max<int64_t>(1, budget / k);
    const bool c_scratch = C.dtype != DType::float32 || p.np < n;
    if (c_scratch && p.mp * p.np > budget) {
      p.np = std::max<int64_t>(1, budget / p.mp);
      if (p.mp * p.np > budget) p.mp = std::max<int64_t>(1, budget / p.np);
    }
  }
  return p;
}

// Whole operands: widened (bf16) or used in place, the result narrowed once.
void converted_whole(const ExecSpace& space, char transA, char transB, float alpha, const GemmIn& A,
                     const GemmIn& B, float beta, const GemmOut& C, int64_t m, int64_t n) {
  const Operand a = panel(space, A, transA, 0, m, 0, transA == 'N' ? A.cols : A.rows, kRoleA);
  const Operand b = panel(space, B, transB, 0, transB == 'N' ? B.rows : B.cols, 0, n, kRoleB);
  float* c = static_cast<float*>(C.data);
  const Window cw{C.data, C.dtype, n};
  if (C.dtype != DType::float32) {
    c = scratch(kRoleC, m * n);
    if (beta != 0.0f) gather(space, c, cw, m, n, 'N');
  }
  kk_gemm(space, a.trans, b.trans, alpha, a.data, a.rows, a.cols, b.data, b.rows, b.cols, beta, c,
          m, n);
  if (C.dtype != DType::float32) {
    scatter_from_f32(space, static_cast<bf16*>(C.data), n, c, m, n);
  }
}

}  // namespace

int64_t converted_gemm(const ExecSpace& space, const GemmLimits& limits, char transA, char transB,
                       float alpha, const GemmIn& A, const GemmIn& B, float beta, const GemmOut& C,
                       int64_t m, int64_t n) {
  if (m == 0 || n == 0) return 0;
  const int64_t k = transA == 'N' ? A.cols : A.rows;
  const Panels p = panel_sizes(limits.converted_scratch_elems, transA, transB, A, B, C, m, n, k);
  if (p.mp == m && p.np == n) {
    converted_whole(space, transA, transB, alpha, A, B, beta, C, m, n);
    return 1;
  }
  // Column panels outside, row panels inside: op(B)'s panel is gathered once per column panel,
  // op(A)'s once in all when it is whole (mp == m).
  const bool a_whole = p.mp == m;
  Operand a{};
  if (a_whole) a = panel(space, A, transA, 0, m, 0, k, kRoleA);
  int64_t panels = 0;
  for (int64_t j0 = 0; j0 < n; j0 += p.np) {
    const int64_t nj = std::min(p.np, n - j0);
    const Operand b = panel(space, B, transB, 0, k, j0, nj, kRoleB);
    for (int64_t i0 = 0; i0 < m; i0 += p.mp) {
      const int64_t mi = std::min(p.mp, m - i0);
      if (!a_whole) a = panel(space, A, transA, i0, mi, 0, k, kRoleA);
      // The result panel: rows i0.. of an fp32 C in place when the panel spans its columns.
      const Window cw{element_at(C.data, C.dtype, i0 * n + j0), C.dtype, n};
      const bool in_place = C.dtype == DType::float32 && nj == n;
      float* c = in_place ? static_cast<float*>(C.data) + i0 * n : scratch(kRoleC, mi * nj);
      if (!in_place && beta != 0.0f) gather(space, c, cw, mi, nj, 'N');
      kk_gemm(space, a.trans, b.trans, alpha, a.data, a.rows, a.cols, b.data, b.rows, b.cols, beta,
              c, mi, nj);
      ++panels;
      if (in_place) continue;
      if (C.dtype == DType::float32) {
        scatter_from_f32(space, static_cast<float*>(C.data) + i0 * n + j0, n, c, mi, nj);
      } else {
        scatter_from_f32(space, static_cast<bf16*>(C.data) + i0 * n + j0, n, c, mi, nj);
      }
    }
  }
  return panels;
}

}  // namespace kktrain
