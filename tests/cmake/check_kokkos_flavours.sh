#!/usr/bin/env bash
# Configures kktrain against a standalone-style Kokkos package (tests/cmake/standalone_kokkos,
# wrapping Debian's libraries) instead of Debian's Trilinos packaging, and checks that
#   - version 4.x is accepted through the Kokkos::kokkos / Kokkos::kokkoskernels targets, the
#     feature summary says so, and the GEMM unit tests (kktrain::core and kktrain::ops, whose
#     products run through Kokkos Kernels) build, link and pass against them: 27 files, where the
#     whole of kktrain (about 120) took 350 s of CI's 2 cores;
#   - version 5.x is refused with a message about C++20;
#   - a Kokkos older than 3.4 is refused.
# usage: check_kokkos_flavours.sh SOURCE_DIR WORK_DIR
set -u
src=$1
work=$2
pkg=$src/tests/cmake/standalone_kokkos
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

configure() {  # configure VERSION DIR [TESTS]
  cmake -S "$src" -B "$2" -DCMAKE_BUILD_TYPE=Release -DKokkos_DIR="$pkg" -DKokkosKernels_DIR="$pkg" \
    -DKKTRAIN_TEST_KOKKOS_VERSION="$1" -DKKTRAIN_ENABLE_TESTS="${3:-OFF}" -DKKTRAIN_ENABLE_BENCH=OFF \
    >"$2.log" 2>&1
}

configure 4.3.1 "$work/v4" ON || { cat "$work/v4.log"; fail "Kokkos 4.3.1 (standalone) did not configure"; }
grep -q "Kokkos          : 4.3.1 (standalone), backends: SERIAL" "$work/v4.log" \
  || { cat "$work/v4.log"; fail "feature summary does not report standalone Kokkos 4.3.1"; }
cmake --build "$work/v4" -j2 --target test_gemm >"$work/v4.build.log" 2>&1 \
  || { tail -30 "$work/v4.build.log"; fail "test_gemm did not build against the standalone targets"; }
"$work/v4/tests/test_gemm" --gtest_brief=1 >"$work/v4.test.log" 2>&1 \
  || { tail -30 "$work/v4.test.log"; fail "test_gemm built against the standalone targets failed"; }

configure 5.0.0 "$work/v5" && fail "Kokkos 5.0.0 was accepted"
grep -q "requires C++20" "$work/v5.log" || { cat "$work/v5.log"; fail "no C++20 message for Kokkos 5"; }

configure 3.2.0 "$work/v3" && fail "Kokkos 3.2.0 was accepted"
grep -q "too old" "$work/v3.log" || { cat "$work/v3.log"; fail "no 'too old' message for Kokkos 3.2"; }
echo "ok: standalone Kokkos 4.x accepted, test_gemm built and passed; 5.x and 3.2 refused"
