# Stand-in for a standalone Kokkos Kernels 4.x install (see KokkosConfig.cmake beside it).
if(NOT TARGET Kokkos::kokkoskernels)
  add_library(Kokkos::kokkoskernels INTERFACE IMPORTED)
  set(_lib /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
  set_target_properties(Kokkos::kokkoskernels PROPERTIES
    INTERFACE_LINK_LIBRARIES "${_lib}/libtrilinos_kokkoskernels.so;Kokkos::kokkos;blas")
endif()
set(KokkosKernels_FOUND TRUE)
