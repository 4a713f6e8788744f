# Finds every external dependency and exposes each through one kktrain-owned interface target,
# so the rest of the build never cares which flavour was found:
#   kktrain::kokkos   Kokkos core + Kokkos Kernels (standalone 4.x, or Debian's Trilinos 3.4)
#   kktrain::mpi      MPI (C API)
#   kktrain::hdf5     HDF5 (serial or parallel: one rank does each file's HDF5 work)
#   kktrain::yaml     yaml-cpp
#   kktrain::json     nlohmann/json (header-only: safetensors headers, Hugging Face config.json)
#   kktrain::nccl     NCCL + CUDA runtime (only when KKTRAIN_ENABLE_NCCL)
#   kktrain::onednn   oneDNN for bf16 GEMM on CPUs (only when found / KKTRAIN_ENABLE_ONEDNN)
#   kktrain::cudnn    cuDNN 9 + CUDA runtime, fused attention (CUDA builds, KKTRAIN_ENABLE_CUDNN)
# and records what was found for the feature summary printed at the end of configuration.

include_guard(GLOBAL)

# ---------------------------------------------------------------------------------------------
# Kokkos and Kokkos Kernels
# ---------------------------------------------------------------------------------------------
# Two flavours exist in the wild:
#  * standalone Kokkos 4.x (Spack, source builds): targets Kokkos::kokkos, Kokkos::kokkoskernels;
#  * Debian's Trilinos packaging (Kokkos 3.4.01, Serial): targets trilinos_kokkoscore and
#    trilinos_kokkoskernels, headers in <prefix>/include/trilinos. Its Kokkos::kokkos target is
#    broken (it points at /usr/lib/include), so it must not be used.
find_package(Kokkos CONFIG REQUIRED)
add_library(kktrain_kokkos INTERFACE)
add_library(kktrain::kokkos ALIAS kktrain_kokkos)

if(TARGET trilinos_kokkoscore)
  set(KKTRAIN_KOKKOS_FLAVOUR "Trilinos")
  find_package(KokkosKernels CONFIG REQUIRED)
  if(NOT TARGET trilinos_kokkoskernels)
    message(FATAL_ERROR "kktrain: found Trilinos Kokkos but not trilinos_kokkoskernels; "
                        "install libtrilinos-kokkos-kernels-dev")
  endif()
  target_link_libraries(kktrain_kokkos INTERFACE trilinos_kokkoskernels trilinos_kokkoscore)
  target_include_directories(kktrain_kokkos SYSTEM INTERFACE ${Kokkos_INCLUDE_DIRS})
  # The Trilinos config does not export a usable version; read it from the generated header.
  find_file(_kk_core_config KokkosCore_config.h PATHS ${Kokkos_INCLUDE_DIRS} NO_DEFAULT_PATH)
  file(STRINGS "${_kk_core_config}" _kk_ver_line REGEX "#define KOKKOS_VERSION ")
  string(REGEX MATCH "[0-9]+" _kk_ver "${_kk_ver_line}")
  math(EXPR _kk_major "${_kk_ver} / 10000")
  math(EXPR _kk_minor "(${_kk_ver} / 100) % 100")
  math(EXPR _kk_patch "${_kk_ver} % 100")
  set(KKTRAIN_KOKKOS_VERSION "${_kk_major}.${_kk_minor}.${_kk_patch}")
  set(KKTRAIN_KOKKOS_DEVICES ${Kokkos_DEVICES})
else()
  set(KKTRAIN_KOKKOS_FLAVOUR "standalone")
  # Kokkos Kernels from Kokkos' own prefix first: a system one (Debian's Trilinos packaging in
  # /usr) would otherwise win over a Kokkos found through Kokkos_ROOT alone.
  get_filename_component(_kk_prefix "${Kokkos_DIR}/../../.." ABSOLUTE)
  find_package(KokkosKernels CONFIG REQUIRED HINTS "${_kk_prefix}")
  if(NOT TARGET Kokkos::kokkoskernels)
    message(FATAL_ERROR "kktrain: Kokkos ${Kokkos_VERSION} (${Kokkos_DIR}) is standalone but the "
                        "Kokkos Kernels found (${KokkosKernels_DIR}) is not its match; set "
                        "KokkosKernels_ROOT to the Kokkos Kernels built against that Kokkos")
  endif()
  set(KKTRAIN_KOKKOS_VERSION "${Kokkos_VERSION}")
  if(KKTRAIN_KOKKOS_VERSION VERSION_GREATER_EQUAL 5)
    message(FATAL_ERROR "kktrain: Kokkos ${KKTRAIN_KOKKOS_VERSION} requires C++20; kktrain is "
                        "C++17 and supports Kokkos 3.4 to 4.x")
  endif()
  if(KKTRAIN_KOKKOS_VERSION VERSION_LESS 3.4)
    message(FATAL_ERROR "kktrain: Kokkos ${KKTRAIN_KOKKOS_VERSION} is too old (need 3.4 to 4.x)")
  endif()
  target_link_libraries(kktrain_kokkos INTERFACE Kokkos::kokkos Kokkos::kokkoskernels)
  set(KKTRAIN_KOKKOS_DEVICES ${Kokkos_DEVICES})
endif()

set(KKTRAIN_KOKKOS_HAS_CUDA OFF)
set(KKTRAIN_KOKKOS_HAS_HIP OFF)
if("CUDA" IN_LIST KKTRAIN_KOKKOS_DEVICES OR Kokkos_ENABLE_CUDA)
  set(KKTRAIN_KOKKOS_HAS_CUDA ON)
  # Every kernel is a KOKKOS_LAMBDA: a CUDA Kokkos needs device lambdas (always on from 4.0; an
  # option before). kokkos_check stops configuration with Kokkos' own message when it is off.
  if(COMMAND kokkos_check)
    kokkos_check(OPTIONS CUDA_LAMBDA)
  endif()
endif()
if("HIP" IN_LIST KKTRAIN_KOKKOS_DEVICES OR Kokkos_ENABLE_HIP)
  set(KKTRAIN_KOKKOS_HAS_HIP ON)
endif()
# The backend every kernel runs on: Kokkos' default execution space (the device backend when the
# Kokkos build has one, else its host-parallel backend, else Serial). Every test carries it as a
# label (tests/CMakeLists.txt), so `ctest -L backend-cuda` is the whole suite on the GPU.
if(KKTRAIN_KOKKOS_HAS_CUDA)
  set(KKTRAIN_BACKEND cuda)
elseif(KKTRAIN_KOKKOS_HAS_HIP)
  set(KKTRAIN_BACKEND hip)
elseif("OPENMP" IN_LIST KKTRAIN_KOKKOS_DEVICES OR Kokkos_ENABLE_OPENMP)
  set(KKTRAIN_BACKEND openmp)
elseif("THREADS" IN_LIST KKTRAIN_KOKKOS_DEVICES OR Kokkos_ENABLE_THREADS)
  set(KKTRAIN_BACKEND threads)
else()
  set(KKTRAIN_BACKEND serial)
endif()

# Which BLAS answers Kokkos Kernels' float GEMM on the host. Debian routes libblas.so through the
# alternatives system; the reference BLAS is ~25x slower than OpenBLAS, so say which one it is.
set(KKTRAIN_BLAS "unknown")
if(EXISTS "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libblas.so")
  get_filename_component(_blas_real "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/libblas.so" REALPATH)
  if(_blas_real MATCHES "openblas")
    set(KKTRAIN_BLAS "OpenBLAS (${_blas_real})")
  elseif(_blas_real MATCHES "blas/libblas")
    set(KKTRAIN_BLAS "reference BLAS (${_blas_real}) -- SLOW, install libopenblas-dev")
  else()
    set(KKTRAIN_BLAS "${_blas_real}")
  endif()
endif()
if(KKTRAIN_KOKKOS_HAS_CUDA OR KKTRAIN_KOKKOS_HAS_HIP)
  set(KKTRAIN_BLAS "${KKTRAIN_BLAS} on the host; the device's: see GPU BLAS")
endif()

# ---------------------------------------------------------------------------------------------
# MPI
# ---------------------------------------------------------------------------------------------
find_package(MPI REQUIRED COMPONENTS C)
add_library(kktrain_mpi INTERFACE)
add_library(kktrain::mpi ALIAS kktrain_mpi)
target_link_libraries(kktrain_mpi INTERFACE MPI::MPI_C)
# C API only: keep Open MPI's / MPICH's deprecated C++ bindings out of C++ translation units.
target_compile_definitions(kktrain_mpi INTERFACE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
list(GET MPI_C_LIBRARIES 0 _mpi_lib)
set(KKTRAIN_MPI "MPI ${MPI_C_VERSION} (${_mpi_lib})")

# ---------------------------------------------------------------------------------------------
# HDF5. The parallel build is preferred (Debian's libhdf5-openmpi-dev, what setup.sh installs)
# but not needed: rank 0 does every file's HDF5 metadata work and the ranks move their rows with
# pread/pwrite (io/h5_rows.hpp), so a site's serial HDF5 module works as well.
# ---------------------------------------------------------------------------------------------
set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
add_library(kktrain_hdf5 INTERFACE)
add_library(kktrain::hdf5 ALIAS kktrain_hdf5)
target_include_directories(kktrain_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS})
target_link_libraries(kktrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES} kktrain::mpi)
target_compile_definitions(kktrain_hdf5 INTERFACE ${HDF5_C_DEFINITIONS})

# ---------------------------------------------------------------------------------------------
# yaml-cpp
# ---------------------------------------------------------------------------------------------
find_package(yaml-cpp CONFIG REQUIRED)
add_library(kktrain_yaml INTERFACE)
add_library(kktrain::yaml ALIAS kktrain_yaml)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(kktrain_yaml INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(kktrain_yaml INTERFACE yaml-cpp)
endif()

# ---------------------------------------------------------------------------------------------
# nlohmann/json (header-only): the JSON of safetensors headers and Hugging Face config.json files
# ---------------------------------------------------------------------------------------------
find_package(nlohmann_json 3.2 CONFIG QUIET)
if(NOT TARGET nlohmann_json::nlohmann_json)
  message(FATAL_ERROR "kktrain: nlohmann/json (3.2 or newer) was not found; kktrain reads and "
                      "writes Hugging Face model directories (safetensors headers, config.json) "
                      "with it. Install it (Debian: nlohmann-json3-dev) or set nlohmann_json_DIR "
                      "to the directory holding nlohmann_jsonConfig.cmake")
endif()
add_library(kktrain_json INTERFACE)
add_library(kktrain::json ALIAS kktrain_json)
target_link_libraries(kktrain_json INTERFACE nlohmann_json::nlohmann_json)

# ---------------------------------------------------------------------------------------------
# PCRE2 (8-bit, UTF + UCP) and utf8proc: the tokenizer's regular expressions (Unicode classes,
# look-ahead, case-insensitive groups) and Unicode normalization (NFC/NFKC/NFD/NFKD).
# ---------------------------------------------------------------------------------------------
find_package(PkgConfig REQUIRED)
pkg_check_modules(KKTRAIN_PCRE2 IMPORTED_TARGET libpcre2-8)
pkg_check_modules(KKTRAIN_UTF8PROC IMPORTED_TARGET libutf8proc)
if(NOT KKTRAIN_PCRE2_FOUND OR NOT KKTRAIN_UTF8PROC_FOUND)
  message(FATAL_ERROR "kktrain: PCRE2 (libpcre2-8) and utf8proc were not both found by pkg-config; "
                      "kktrain's tokenizers need them. Install them (Debian: libpcre2-dev "
                      "libutf8proc-dev) or set PKG_CONFIG_PATH")
endif()
add_library(kktrain_unicode INTERFACE)
add_library(kktrain::unicode ALIAS kktrain_unicode)
target_link_libraries(kktrain_unicode INTERFACE PkgConfig::KKTRAIN_PCRE2 PkgConfig::KKTRAIN_UTF8PROC)

# ---------------------------------------------------------------------------------------------
# NCCL (optional): default ON exactly when Kokkos was built with CUDA.
# ---------------------------------------------------------------------------------------------
option(KKTRAIN_ENABLE_NCCL "Build the NCCL communicator" ${KKTRAIN_KOKKOS_HAS_CUDA})
set(KKTRAIN_NCCL "OFF")
if(KKTRAIN_ENABLE_NCCL)
  find_package(CUDAToolkit QUIET)
  set(_cuda_hint "$ENV{CUDA_HOME}" "/usr/local/cuda")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${_cuda_hint}
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${_cuda_hint}
               PATH_SUFFIXES lib lib64)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY OR NOT TARGET CUDA::cudart)
    message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_NCCL=ON but NCCL or the CUDA runtime was not "
                        "found (nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY}); set "
                        "NCCL_ROOT/CUDA_HOME or configure with -DKKTRAIN_ENABLE_NCCL=OFF")
  endif()
  add_library(kktrain_nccl INTERFACE)
  add_library(kktrain::nccl ALIAS kktrain_nccl)
  target_include_directories(kktrain_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(kktrain_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  set(KKTRAIN_NCCL "ON (${NCCL_LIBRARY})")
endif()

# ---------------------------------------------------------------------------------------------
# GPU BLAS (optional): cuBLAS in CUDA builds, rocBLAS in HIP builds, for the bf16 products and the
# batched ones (ops/gemm_vendor_gpu.cpp). KKTRAIN_ENABLE_GPU_BLAS: AUTO (default: on when
# found), ON (found or a configuration error), OFF. Without it Kokkos Kernels' own GEMM runs every
# product on the device (bf16 operands through fp32 copies): correct, slower. rocBLAS is not a
# Debian package, so a HIP build on Debian falls back to it.
# ---------------------------------------------------------------------------------------------
set(KKTRAIN_ENABLE_GPU_BLAS "AUTO" CACHE STRING "cuBLAS / rocBLAS GEMM in GPU builds: AUTO, ON or OFF")
set_property(CACHE KKTRAIN_ENABLE_GPU_BLAS PROPERTY STRINGS AUTO ON OFF)
set(KKTRAIN_HAVE_CUBLAS OFF)
set(KKTRAIN_HAVE_ROCBLAS OFF)
set(KKTRAIN_GPU_BLAS "none (host Kokkos build)")
string(TOUPPER "${KKTRAIN_ENABLE_GPU_BLAS}" _gpublas_want)
if(KKTRAIN_KOKKOS_HAS_CUDA OR KKTRAIN_KOKKOS_HAS_HIP)
  if(_gpublas_want STREQUAL "OFF")
    set(KKTRAIN_GPU_BLAS "off (KKTRAIN_ENABLE_GPU_BLAS=OFF): Kokkos Kernels' GEMM")
  elseif(KKTRAIN_KOKKOS_HAS_CUDA)
    find_package(CUDAToolkit QUIET)
    if(TARGET CUDA::cublas)
      set(KKTRAIN_HAVE_CUBLAS ON)
      set(KKTRAIN_GPU_BLAS "cuBLAS ${CUDAToolkit_VERSION}")
    endif()
  else()
    find_package(rocblas QUIET)
    if(TARGET roc::rocblas)
      set(KKTRAIN_HAVE_ROCBLAS ON)
      set(KKTRAIN_GPU_BLAS "rocBLAS ${rocblas_VERSION}")
    endif()
  endif()
  if(NOT KKTRAIN_HAVE_CUBLAS AND NOT KKTRAIN_HAVE_ROCBLAS AND NOT _gpublas_want STREQUAL "OFF")
    if(_gpublas_want STREQUAL "ON")
      message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_GPU_BLAS=ON but neither cuBLAS (CUDA builds) "
                          "nor rocBLAS (HIP builds) was found; set CUDAToolkit_ROOT / rocblas_DIR "
                          "or configure with -DKKTRAIN_ENABLE_GPU_BLAS=AUTO or OFF")
    endif()
    set(KKTRAIN_GPU_BLAS "not found: Kokkos Kernels' GEMM (bf16 through fp32 copies)")
  endif()
endif()

# ---------------------------------------------------------------------------------------------
# cuDNN (optional): fused attention on NVIDIA GPUs through cuDNN 9's backend graph API
# (ops/attention_cudnn.cpp). CUDA builds only. KKTRAIN_ENABLE_CUDNN: AUTO (default: on when
# found), ON (found or a configure error), OFF. Found by header and library under CUDNN_ROOT, the
# CUDA toolkit's root, CUDA_HOME or /usr/local/cuda (the toolkit there carries cuDNN 9's headers
# and libcudnn.so.9). Not yet called by attention_forward/backward.
# ---------------------------------------------------------------------------------------------
set(KKTRAIN_ENABLE_CUDNN "AUTO" CACHE STRING "cuDNN fused attention in CUDA builds: AUTO, ON or OFF")
set_property(CACHE KKTRAIN_ENABLE_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(KKTRAIN_HAVE_CUDNN OFF)
set(KKTRAIN_CUDNN "off (host Kokkos build)")
string(TOUPPER "${KKTRAIN_ENABLE_CUDNN}" _cudnn_want)
if(NOT _cudnn_want MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_CUDNN=${KKTRAIN_ENABLE_CUDNN}; use AUTO, ON or OFF")
endif()
if(_cudnn_want STREQUAL "OFF")
  set(KKTRAIN_CUDNN "off (KKTRAIN_ENABLE_CUDNN=OFF)")
elseif(NOT KKTRAIN_KOKKOS_HAS_CUDA)
  if(_cudnn_want STREQUAL "ON")
    message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_CUDNN=ON, but this Kokkos has no CUDA backend "
                        "(cuDNN attention runs on NVIDIA GPUs only); configure with "
                        "-DKKTRAIN_ENABLE_CUDNN=AUTO or OFF")
  endif()
  if(KKTRAIN_KOKKOS_HAS_HIP)
    set(KKTRAIN_CUDNN "off (HIP build)")
  endif()
else()
  find_package(CUDAToolkit QUIET)
  set(_cudnn_hint ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} $ENV{CUDA_HOME}
      /usr/local/cuda)
  find_path(KKTRAIN_CUDNN_INCLUDE_DIR cudnn_graph.h HINTS ${_cudnn_hint} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(KKTRAIN_CUDNN_LIBRARY cudnn HINTS ${_cudnn_hint} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib64 lib)
  set(_cudnn_ver "")
  if(KKTRAIN_CUDNN_INCLUDE_DIR AND EXISTS "${KKTRAIN_CUDNN_INCLUDE_DIR}/cudnn_version.h")
    file(STRINGS "${KKTRAIN_CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_ver_lines
         REGEX "#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ")
    foreach(_line IN LISTS _cudnn_ver_lines)
      string(REGEX MATCH "[0-9]+$" _num "${_line}")
      list(APPEND _cudnn_ver ${_num})
    endforeach()
    string(REPLACE ";" "." _cudnn_ver "${_cudnn_ver}")
  endif()
  if(KKTRAIN_CUDNN_INCLUDE_DIR AND KKTRAIN_CUDNN_LIBRARY AND TARGET CUDA::cudart
     AND _cudnn_ver VERSION_GREATER_EQUAL 9.0)
    set(KKTRAIN_HAVE_CUDNN ON)
    set(KKTRAIN_CUDNN "${_cudnn_ver} (fused attention, not yet dispatched; ${KKTRAIN_CUDNN_LIBRARY})")
    add_library(kktrain_cudnn INTERFACE)
    add_library(kktrain::cudnn ALIAS kktrain_cudnn)
    target_include_directories(kktrain_cudnn SYSTEM INTERFACE ${KKTRAIN_CUDNN_INCLUDE_DIR})
    target_link_libraries(kktrain_cudnn INTERFACE ${KKTRAIN_CUDNN_LIBRARY} CUDA::cudart)
  else()
    string(CONCAT KKTRAIN_CUDNN "not found (cudnn_graph.h: ${KKTRAIN_CUDNN_INCLUDE_DIR}, "
                  "libcudnn: ${KKTRAIN_CUDNN_LIBRARY}, version: '${_cudnn_ver}'; need 9.x)")
    if(_cudnn_want STREQUAL "ON")
      message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_CUDNN=ON but no cuDNN 9 was found "
                          "(cudnn_graph.h: ${KKTRAIN_CUDNN_INCLUDE_DIR}, libcudnn: "
                          "${KKTRAIN_CUDNN_LIBRARY}, version: '${_cudnn_ver}'); set CUDNN_ROOT or "
                          "configure with -DKKTRAIN_ENABLE_CUDNN=AUTO or OFF")
    endif()
  endif()
endif()

# ---------------------------------------------------------------------------------------------
# oneDNN (optional): the bf16 x bf16 GEMM on CPUs with AVX512-BF16 / AMX (ops/gemm_onednn.cpp).
# Host Kokkos builds only. KKTRAIN_ENABLE_ONEDNN: AUTO (default: on when found), ON (found or a
# configure error), OFF. Found by header and library, not by find_package(dnnl CONFIG): Debian's
# dnnl-config.cmake (2.6.3, built with the OpenCL GPU runtime) calls find_package(OpenCL
# REQUIRED), which fails the whole configure unless ocl-icd-opencl-dev is installed.
# ---------------------------------------------------------------------------------------------
set(KKTRAIN_ENABLE_ONEDNN "AUTO" CACHE STRING "oneDNN bf16 GEMM on CPUs: AUTO, ON or OFF")
set_property(CACHE KKTRAIN_ENABLE_ONEDNN PROPERTY STRINGS AUTO ON OFF)
set(KKTRAIN_ONEDNN "off")
set(KKTRAIN_HAVE_ONEDNN OFF)
string(TOUPPER "${KKTRAIN_ENABLE_ONEDNN}" _onednn_want)
if(_onednn_want STREQUAL "OFF" OR _onednn_want STREQUAL "FALSE" OR _onednn_want STREQUAL "0"
   OR _onednn_want STREQUAL "NO")
  set(KKTRAIN_ONEDNN "off (KKTRAIN_ENABLE_ONEDNN=OFF)")
elseif(KKTRAIN_KOKKOS_HAS_CUDA OR KKTRAIN_KOKKOS_HAS_HIP)
  if(NOT _onednn_want STREQUAL "AUTO")
    message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_ONEDNN=ON, but oneDNN is the host bf16 GEMM and "
                        "this Kokkos is built for a GPU (bf16 GEMM goes to cuBLAS/rocBLAS there); "
                        "configure with -DKKTRAIN_ENABLE_ONEDNN=OFF or AUTO")
  endif()
  set(KKTRAIN_ONEDNN "off (GPU Kokkos build: the device runs the products)")
else()
  set(_dnnl_hint ${dnnl_ROOT} $ENV{dnnl_ROOT} $ENV{DNNLROOT})
  find_path(KKTRAIN_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp HINTS ${_dnnl_hint}
            PATH_SUFFIXES include)
  find_library(KKTRAIN_DNNL_LIBRARY dnnl HINTS ${_dnnl_hint} PATH_SUFFIXES lib lib64)
  if(KKTRAIN_DNNL_INCLUDE_DIR AND KKTRAIN_DNNL_LIBRARY)
    file(STRINGS "${KKTRAIN_DNNL_INCLUDE_DIR}/oneapi/dnnl/dnnl_version.h" _dnnl_ver_lines
         REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
    set(_dnnl_ver "")
    foreach(_line IN LISTS _dnnl_ver_lines)
      string(REGEX MATCH "[0-9]+$" _num "${_line}")
      list(APPEND _dnnl_ver ${_num})
    endforeach()
    string(REPLACE ";" "." _dnnl_ver "${_dnnl_ver}")
    if(_dnnl_ver VERSION_LESS 2.0 OR _dnnl_ver VERSION_GREATER_EQUAL 3.0)
      # oneDNN 3.x removed matmul::desc and output scales: the 2.x API is what gemm_onednn.cpp
      # speaks.
      set(KKTRAIN_ONEDNN "off (oneDNN ${_dnnl_ver} found; kktrain needs the 2.x API)")
    else()
      set(KKTRAIN_HAVE_ONEDNN ON)
      set(KKTRAIN_ONEDNN "${_dnnl_ver} (bf16 GEMM; ${KKTRAIN_DNNL_LIBRARY})")
    endif()
  else()
    set(KKTRAIN_ONEDNN "off (not found: install libdnnl-dev or set dnnl_ROOT)")
  endif()
  if(NOT KKTRAIN_HAVE_ONEDNN AND NOT _onednn_want STREQUAL "AUTO")
    message(FATAL_ERROR "kktrain: KKTRAIN_ENABLE_ONEDNN=${KKTRAIN_ENABLE_ONEDNN} but no usable "
                        "oneDNN 2.x was found (dnnl.hpp: ${KKTRAIN_DNNL_INCLUDE_DIR}, libdnnl: "
                        "${KKTRAIN_DNNL_LIBRARY}); install libdnnl-dev (Debian), set dnnl_ROOT, "
                        "or configure with -DKKTRAIN_ENABLE_ONEDNN=OFF")
  endif()
endif()
if(KKTRAIN_HAVE_ONEDNN)
  add_library(kktrain_onednn INTERFACE)
  add_library(kktrain::onednn ALIAS kktrain_onednn)
  target_include_directories(kktrain_onednn SYSTEM INTERFACE ${KKTRAIN_DNNL_INCLUDE_DIR})
  target_link_libraries(kktrain_onednn INTERFACE ${KKTRAIN_DNNL_LIBRARY})
endif()

function(kktrain_feature_summary)
  message(STATUS "")
  message(STATUS "kktrain feature summary")
  message(STATUS "  Kokkos          : ${KKTRAIN_KOKKOS_VERSION} (${KKTRAIN_KOKKOS_FLAVOUR}), "
                 "backends: ${KKTRAIN_KOKKOS_DEVICES}")
  message(STATUS "  BLAS            : ${KKTRAIN_BLAS}")
  message(STATUS "  MPI             : ${KKTRAIN_MPI}")
  message(STATUS "  HDF5            : ${HDF5_VERSION}, parallel: ${HDF5_IS_PARALLEL}")
  message(STATUS "  yaml-cpp        : ${yaml-cpp_VERSION}")
  message(STATUS "  nlohmann/json   : ${nlohmann_json_VERSION}")
  message(STATUS "  PCRE2, utf8proc : ${KKTRAIN_PCRE2_VERSION}, ${KKTRAIN_UTF8PROC_VERSION}")
  message(STATUS "  NCCL            : ${KKTRAIN_NCCL}")
  message(STATUS "  oneDNN          : ${KKTRAIN_ONEDNN}")
  message(STATUS "  GPU BLAS        : ${KKTRAIN_GPU_BLAS}")
  message(STATUS "  cuDNN           : ${KKTRAIN_CUDNN}")
  message(STATUS "  tests           : ${KKTRAIN_ENABLE_TESTS}")
  message(STATUS "  benchmarks      : ${KKTRAIN_ENABLE_BENCH}")
  message(STATUS "  sanitizers      : ${KKTRAIN_SANITIZE}")
  message(STATUS "")
endfunction()
