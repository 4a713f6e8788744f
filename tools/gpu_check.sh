#!/usr/bin/env bash
# tools/gpu_check.sh: the GPU checks as one prepared run. A CUDA build made on a machine without
# a GPU is packed with what it needs to run, carried to a machine with one NVIDIA GPU, and there
# tested and measured in one call, its results in one table.
#
#   tools/gpu_check.sh pack [BUILD]        on the build machine, after building every target of
#                                          BUILD (default build-cuda; README "Building for CUDA
#                                          and HIP"): writes .gpu/bundle.tar.xz and says its size
#   tools/gpu_check.sh run [--budget S] [--only STAGES] [--tests REGEX] [--device cpu]
#                          [--python P]
#                                          on the GPU machine, in the repository root, with .gpu
#                                          carried: runs the stages below, at most S seconds in
#                                          all (default 540), and writes $OUT/summary.md (also
#                                          printed last) and $OUT/logs.tar.xz (every log)
#
# The bundle (xz, 47 MiB for a CUDA build of the tree: the device tool carries 64 MiB with it)
# holds BUILD's programs (kktrain, the test and benchmark programs, the Kokkos Tools libraries),
# its ctest files, the CMake module ctest's test discovery includes, and the shared libraries the
# programs link beyond the C/C++ runtime and CUDA's (HDF5, yaml-cpp, PCRE2, utf8proc, Open MPI
# and theirs), plus Open MPI's mpirun and plugins. CUDA's own libraries (cuBLAS, cuDNN, NCCL, the
# runtime) are the GPU machine's: `run` finds them (the CUDA toolkit's lib64, PyTorch's nvidia
# packages). Carrying a build made here is faster than building there: a 16-core machine needs
# about 5 minutes for the tree (215 nvcc compiles, 70 core-minutes on the build machine), a third
# of a 15-minute lease, before the first check.
#
# Stages of `run`, in this order; each has a time limit, and a stage that no longer fits in the
# budget is reported as not run. Tests run through ctest with the build's own definitions, paths
# rewritten to where the bundle lies (a test's binary path, the sources, the Python).
#   env        nvidia-smi, the driver, PyTorch and its CUDA, the libraries the programs resolve
#   unit       ctest -L unit: every kernel's unit tests on the GPU (attention, GEMM, optimizer,
#              norms, rounding, collectives' kernels, ...)
#   attention  bench_attention per kernel (model.attention: tiled_gemm, team) against PyTorch's
#              scaled_dot_product_attention (bench/torch_attention.py) at 3 GPU shapes
#   step       bench/gpu_step_bench.py: the training step against PyTorch (medium, wide, 1b; every
#              attention choice) and the optimizer step against copy bandwidth
#   profile    the kernel timer (bench/kernel_timer.cpp) over 2 steps of the wide shape with
#              CUDA_LAUNCH_BLOCKING=1 (each kernel timed alone): the top kernels and their share
#   parity     ctest -L parity: gradients and losses against the PyTorch reference
#   train      ctest -L 'train|checkpoint|sync|optim' (single-rank and multi-rank): training,
#              resume bit for bit, host waits per step
#   mpi        ctest -L mpi: 2-4 ranks on the one GPU (MPI between them; NCCL needs a GPU each)
# Stage names for --only: a comma-separated list (e.g. --only unit,attention to rerun those);
# --tests REGEX keeps the ctest stages to the tests whose names match (ctest -R: a rerun of the
# failures).
# --device cpu is a dry run of the script itself with a host build packed (no GPU): the same
# stages, PyTorch on CPUs, small shapes. --python: the Python with PyTorch (default: python3).
set -u -o pipefail

die() { echo "gpu_check: $*" >&2; exit 2; }
SELF=$(readlink -f "${BASH_SOURCE[0]}")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export ROOT
GPU="$ROOT/.gpu"

# Libraries every machine has (and that must come from the machine itself): not packed.
SYSTEM_LIBS='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libcrypt|libgcc_s|libstdc\+\+|libcuda|libnvidia)\.'
# CUDA's libraries: the GPU machine's own (its driver's CUDA).
CUDA_LIBS='^(libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink|libcufft|libcusparse|libcusolver|libcurand)'

pack() {
  local build=${1:-build-cuda}
  [[ $build = /* ]] || build="$ROOT/$build"
  [ -f "$build/CMakeCache.txt" ] || die "$build is not a CMake build directory"
  [ -x "$build/kktrain" ] || die "$build/kktrain is missing: build every target first"
  local backend=host
  if ldd "$build/kktrain" | grep libcudart > /dev/null; then backend=cuda; fi
  # Sources changed since kktrain was linked: the bundle would not test this tree.
  local stale
  stale=$(cd "$ROOT" && git ls-files -z '*.cpp' '*.hpp' '*.c' '*.h' '*.in' '*CMakeLists.txt' \
            '*.cmake' | xargs -0 -I{} find {} -newer "$build/kktrain" | head -3 | tr '\n' ' ')
  [ -z "$stale" ] || echo "gpu_check: warning: $build is older than these sources: $stale(build every target first)" >&2
  local stage="$GPU/stage"
  rm -rf "$GPU/unpacked" "$GPU/out"  # (a dry run's, which the device call would carry too)
  rm -rf "$stage" && mkdir -p "$stage/build" "$stage/lib" "$stage/cmake" "$stage/mpi" || exit 2
  # Programs and shared objects the tests and benchmarks run, and the ctest files.
  (cd "$build" && find . \( -path '*/CMakeFiles' -o -path ./npm -o -path ./Testing \) -prune -o -type f \
      \( -perm -u+x -o -name '*.so' -o -name 'CTestTestfile.cmake' -o -name '*_include.cmake' \) \
      ! -name '*.sh' -print) | while read -r f; do
    mkdir -p "$stage/build/$(dirname "$f")" && cp -p "$build/$f" "$stage/build/$f"
  done
  # ctest's gtest discovery includes CMake's GoogleTestAddTests.cmake by absolute path.
  local gtest_module
  gtest_module=$(grep -ho 'include("[^"]*GoogleTestAddTests.cmake")' -r "$build/tests" \
                   --include='*_include.cmake' | head -1 | sed 's/include("\(.*\)")/\1/')
  [ -n "$gtest_module" ] && cp "$gtest_module" "$stage/cmake/"
  # Open MPI: mpirun and what it loads at run time (plugins, help texts), for the mpi stage.
  local mpirun_path
  mpirun_path=$(command -v mpirun || true)
  if [ -n "$mpirun_path" ]; then
    cp -L "$mpirun_path" "$stage/mpi/mpirun"
    local d
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi \
             /usr/share/pmix /etc/openmpi; do
      [ -d "$d" ] && mkdir -p "$stage/mpi/root$(dirname "$d")" && cp -a "$d" "$stage/mpi/root$d"
    done
  fi
  # Shared libraries beyond the system's and CUDA's, for every packed program and plugin.
  local needed="$GPU/needed.txt"
  : > "$needed"
  find "$stage/build" "$stage/mpi" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
    xargs -0 -n 50 ldd 2>/dev/null | awk '/=>/ {print $1, $3}' | sort -u > "$needed.all"
  awk '{print $1}' "$needed.all" | grep -E "$CUDA_LIBS" | sort -u > "$GPU/cuda_libs.txt"
  grep -v -E "$SYSTEM_LIBS" "$needed.all" | grep -v -E "$CUDA_LIBS" | awk '$2 ~ /^\// {print $2}' |
    sort -u > "$needed"
  xargs -a "$needed" -I{} cp -L {} "$stage/lib/"
  {
    echo "commit $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet || echo ' (modified tree)')"
    echo "packed $(date -u +%Y-%m-%dT%H:%MZ) on $(hostname)"
    echo "backend $backend"
    echo "stale ${stale:-no}"
    echo "build_dir $build"
    echo "source_dir $(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
    echo "python $(sed -n 's/^KKTRAIN_PYTHON:[A-Z]*=//p' "$build/CMakeCache.txt")"
    echo "gtest_module ${gtest_module:-none}"
    echo "cuda_libs $(tr '\n' ' ' < "$GPU/cuda_libs.txt")"
  } > "$stage/manifest.txt"
  rm -f "$needed.all" "$needed" "$GPU/cuda_libs.txt"
  tar -C "$stage" -cf - . | xz -T0 -6 > "$GPU/bundle.tar.xz" || die "packing failed"
  rm -rf "$stage"
  local tree_mib bundle_mib
  bundle_mib=$(( $(stat -c %s "$GPU/bundle.tar.xz") >> 20 ))
  tree_mib=$(( $(git -C "$ROOT" ls-files -z | xargs -0 stat -c %s 2>/dev/null |
                 awk '{s += $1} END {print s}') >> 20 ))
  echo "gpu_check: .gpu/bundle.tar.xz: $bundle_mib MiB ($backend build of $build), tree $tree_mib MiB"
  (( bundle_mib + tree_mib < 64 )) || die "bundle + tree over the 64 MiB a device call carries"
  echo "gpu_check: on the GPU machine: tools/gpu_check.sh run   (device tool: carry [\".gpu\"])"
}

# ---- run -----------------------------------------------------------------------------------

OUT=${OUT:-$ROOT/.gpu/out}
LOGS=""
START=$SECONDS
BUDGET=540
ONLY=""
DEVICE=${DEVICE:-cuda}  # --device cpu: a dry run of the script with a host build (no GPU)
TESTS=${TESTS:-}  # --tests REGEX: only the tests of each ctest stage whose names match
SUMMARY=()

left() { echo $(( BUDGET - (SECONDS - START) )); }
row() { SUMMARY+=("| $1 | $2 | $3 | $4 |"); }
wanted() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }

# stage NAME LIMIT COMMAND...: runs COMMAND (its output in $LOGS/NAME.log) under LIMIT seconds or
# what is left of the budget, whichever is less; a stage with under 30 s left is not run.
stage() {
  local name=$1 limit=$2
  shift 2
  wanted "$name" || return 0
  local budget
  budget=$(left)
  if (( budget < 30 )); then
    row "$name" "not run" 0 "out of time (budget $BUDGET s)"
    return 0
  fi
  (( limit > budget )) && limit=$budget
  local t0=$SECONDS rc=0
  echo "== $name (limit $limit s)"
  # (the script runs itself for the stage: timeout runs programs, not shell functions)
  timeout --kill-after=10 "$limit" bash "$SELF" __call "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
  local secs=$(( SECONDS - t0 )) what
  what=$(result_of "$name" "$rc")
  row "$name" "$( ((rc == 0)) && echo ok || { ((rc == 124 || rc == 137)) && echo "timed out" || echo "failed ($rc)"; })" \
      "$secs" "$what"
  echo "   $what"
}

# One line of results from a stage's log: ctest's count, or the benchmark's table rows.
result_of() {
  local log="$LOGS/$1.log"
  case $1 in
    env) grep -E '^(gpu|torch|missing|bundle)' "$log" | tr '\n' ';' ;;
    attention|profile) grep -E '^\| [^-]' "$log" | tail -n +2 | tr '\n' ' ' | cut -c1-900 ;;
    step) grep -E '^(medium|wide|1b|small|device triad|B: )' "$log" | tr -s ' ' | tr '\n' ';' |
          cut -c1-1200 ;;
    *) { grep -E 'tests passed|tests failed' "$log" | tail -1
         grep -E '^\s+[0-9]+ - ' "$log" | sed 's/^ *//' | head -8 | tr '\n' ';'; } | tr '\n' ' ' ;;
  esac
}

ctest_stage() {  # ctest over the unpacked build, tests selected by label regex (and --tests)
  ctest --test-dir "$BUILD" -L "$1" ${TESTS:+-R "$TESTS"} -j "$2" --timeout "$3" \
    --output-on-failure --no-tests=error
}

env_stage() {
  if ! nvidia-smi; then
    echo "missing: nvidia-smi failed"
    [ "$DEVICE" = cpu ] || return 1
  fi
  echo "gpu $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
  echo "torch $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local p missing=0
  for p in "$BUILD/kktrain" "$BUILD/bench/bench_model" "$BUILD/bench/bench_attention"; do
    [ -x "$p" ] || continue
    if ldd "$p" | grep 'not found'; then missing=1; fi
  done
  (( missing == 0 )) || { echo "missing: libraries not found (above)"; return 1; }
  "$BUILD/kktrain" --version
  echo "bundle: $(grep -E '^(commit|packed|backend|stale) ' "$GPU/unpacked/manifest.txt" | tr '\n' ';')"
}

# The attention alone at GPU shapes: each kernel, then PyTorch's SDPA, alternating rounds.
attention_stage() {
  local shapes=("4 2048 16 8 128" "2 4096 32 8 64" "8 1024 16 16 64") rounds=3
  [ "$DEVICE" = cpu ] && shapes=("2 256 4 2 64")
  echo "| B T H KV D | impl | median ms | TFLOP/s | vs SDPA time |"
  echo "|---|---|---|---|---|"
  local s
  for s in "${shapes[@]}"; do
    read -r B T H KV D <<< "$s"
    local args=(--batch "$B" --seq "$T" --heads "$H" --kv-heads "$KV" --head-dim "$D"
                --compute bfloat16 --iters 10)
    declare -A med=()
    local impl r line
    for impl in tiled_gemm team torch; do
      local ts=()
      for ((r = 0; r < rounds; ++r)); do
        if [ "$impl" = torch ]; then
          line=$("$PY" "$ROOT/bench/torch_attention.py" "${args[@]}" --device "$DEVICE" | tail -1)
        else
          line=$("$BUILD/bench/bench_attention" "${args[@]}" --materialized 0 --kernel "$impl" |
                 grep '"attention"' | tail -1)
        fi
        echo "# $impl $s: $line" >&2
        ts+=("$(echo "$line" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["median_s"])')")
      done
      med[$impl]=$(printf '%s\n' "${ts[@]}" | sort -g | sed -n "$(( (rounds + 1) / 2 ))p")
    done
    for impl in tiled_gemm team torch; do
      "$PY" -c "
B,T,H,KV,D=$B,$T,$H,$KV,$D; m=${med[$impl]}; t=${med[torch]}
f=6.0*B*H*T*T*D
print(f'| {B} {T} {H} {KV} {D} | $impl | {m*1e3:.2f} | {f/m/1e12:.1f} | {t/m:.2f}x |')"
    done
    unset med
  done
  echo "vs SDPA time = PyTorch's median time / this one's (the goal: 0.85x or more)"
}

profile_stage() {
  local timer="$BUILD/bench/libkktrain_kernel_timer.so"
  [ -f "$timer" ] || { echo "no kernel timer in the bundle"; return 1; }
  CUDA_LAUNCH_BLOCKING=1 KOKKOS_TOOLS_LIBS="$timer" KOKKOS_PROFILE_LIBRARY="$timer" \
    KKTRAIN_KERNEL_TIMER_OUT="$LOGS/profile.json" \
    "$BUILD/bench/bench_model" $PROFILE_SHAPE --compute bfloat16 --warmup 1 --iters 2 --gemm-peak 0
  "$PY" - "$LOGS/profile.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))  # bench/kernel_timer.cpp: {"total_s", "entries": [...]}
print("| kernel or region | s over 2 steps | calls | share of the steps |")
print("|---|---|---|---|")
for r in d["entries"][:5]:
    print(f"| {r['name'][:60]} | {r['self_s']:.4f} | {r['calls']} | "
          f"{r['self_s'] / d['total_s']:.1%} |")
EOF
}

run() {
  while [ $# -gt 0 ]; do
    case $1 in
      --budget) BUDGET=$2; shift 2 ;;
      --only) ONLY=$2; shift 2 ;;
      --device) DEVICE=$2; shift 2 ;;
      --python) PY=$2; shift 2 ;;
      --tests) TESTS=$2; shift 2 ;;
      *) die "run: unknown option $1" ;;
    esac
  done
  [ -f "$GPU/bundle.tar.xz" ] || die ".gpu/bundle.tar.xz is missing: tools/gpu_check.sh pack, then carry .gpu"
  mkdir -p "$OUT" && LOGS=$(mktemp -d) || exit 2
  local unpacked="$GPU/unpacked"
  rm -rf "$unpacked" && mkdir -p "$unpacked" && xz -dc "$GPU/bundle.tar.xz" | tar -C "$unpacked" -xf - ||
    die "cannot unpack .gpu/bundle.tar.xz"
  BUILD="$unpacked/build"
  local m="$unpacked/manifest.txt"
  local old_build old_src old_py module
  old_build=$(sed -n 's/^build_dir //p' "$m"); old_src=$(sed -n 's/^source_dir //p' "$m")
  old_py=$(sed -n 's/^python //p' "$m"); module=$(sed -n 's/^gtest_module //p' "$m")
  [ -n "${PY:-}" ] || PY=$(command -v python3) || die "no python3"
  # The build's paths, rewritten to where the bundle, the sources and this machine's Python are.
  find "$BUILD" \( -name 'CTestTestfile.cmake' -o -name '*_include.cmake' \) -print0 |
    xargs -0 sed -i -e "s#$old_build#@BUILD@#g" -e "s#$old_src#@SRC@#g" \
      -e "s#${old_py:-/usr/bin/python3}#$PY#g" -e "s#$module#$unpacked/cmake/GoogleTestAddTests.cmake#g" \
      -e "s#@BUILD@#$BUILD#g" -e "s#@SRC@#$ROOT#g"
  # Libraries: the bundle's, then CUDA's from the toolkit or PyTorch's nvidia packages.
  local dirs="$unpacked/lib" lib d
  for lib in $(sed -n 's/^cuda_libs //p' "$m"); do
    d=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/lib /usr/lib/x86_64-linux-gnu \
          "$($PY -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)" /opt \
          -maxdepth 6 -name "$lib" -print -quit 2>/dev/null | head -1)
    [ -n "$d" ] && dirs="$dirs:$(dirname "$d")"
  done
  export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Open MPI where the machine has none: its files where the packed mpirun looks for them.
  if ! command -v mpirun > /dev/null && [ -x "$unpacked/mpi/mpirun" ]; then
    (cd "$unpacked/mpi/root" && find . -type f -o -type l) | while read -r f; do
      [ -e "/$f" ] || { mkdir -p "/$(dirname "$f")" && cp -a "$unpacked/mpi/root/$f" "/$f"; }
    done
    mkdir -p "$unpacked/bin" && ln -sf "$unpacked/mpi/mpirun" "$unpacked/bin/mpirun"
    export PATH="$unpacked/bin:$PATH"
  fi
  SHAPES=medium,wide,1b OPTIM_PARAMS=$((1 << 28))
  PROFILE_SHAPE="--hidden 2048 --layers 8 --heads 16 --kv-heads 8 --ffn 5632 --vocab 32000 --seq 2048 --batch 4"
  if [ "$DEVICE" = cpu ]; then  # (a dry run: the GPU shapes take minutes a step on CPUs)
    SHAPES=small OPTIM_PARAMS=$((1 << 20))
    PROFILE_SHAPE="--hidden 256 --layers 2 --heads 4 --kv-heads 2 --ffn 688 --vocab 256 --seq 256 --batch 4"
  fi
  export OMPI_MCA_mpi_yield_when_idle=1 PYTHONUNBUFFERED=1 BUILD PY LOGS DEVICE TESTS SHAPES PROFILE_SHAPE
  echo "gpu_check: $(sed -n 's/^commit //p' "$m"), tree $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); budget $BUDGET s"
  local j
  j=$(nproc)
  stage env 60 env_stage
  stage unit 150 ctest_stage '^unit$' "$j" 120
  stage attention 120 attention_stage
  stage step 200 "$PY" "$ROOT/bench/gpu_step_bench.py" --build "$BUILD" --rounds 1 --warmup 1 \
        --iters 3 --shapes "$SHAPES" --attention auto,tiled_gemm,team --timeout 150 --device "$DEVICE" \
        --optim-params "$OPTIM_PARAMS"
  stage profile 60 profile_stage
  stage parity 120 ctest_stage '^parity$' "$j" 120
  stage train 150 ctest_stage '^(train|checkpoint|sync|optim)$' "$(( j / 2 ))" 150
  stage mpi 120 ctest_stage '^mpi$' 4 120
  {
    echo "# gpu_check $(date -u +%Y-%m-%dT%H:%MZ): bundle $(sed -n 's/^commit //p' "$m")"
    echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1);" \
         "$(( SECONDS - START )) s of the $BUDGET s budget"
    echo
    echo "| stage | result | s | figures |"
    echo "|---|---|---|---|"
    printf '%s\n' "${SUMMARY[@]}"
  } > "$OUT/summary.md"
  cp "$OUT/summary.md" "$LOGS/"
  tar -C "$LOGS" -cf - . | xz -T0 -6 > "$OUT/logs.tar.xz"
  for f in attention step; do [ -f "$LOGS/$f.log" ] && cp "$LOGS/$f.log" "$OUT/"; done
  echo
  cat "$OUT/summary.md"
  rm -rf "$LOGS"
}

case ${1:-} in
  __call) shift; "$@" ;;  # one stage, from stage() above
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) die "usage: tools/gpu_check.sh pack [BUILD] | run [--budget S] [--only STAGES]" ;;
esac
