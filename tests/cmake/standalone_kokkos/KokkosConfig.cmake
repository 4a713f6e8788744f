# A stand-in for a standalone Kokkos 4.x install (as Spack or a source build provides it), used
# by check_kokkos_flavours.sh to exercise kktrain's standalone-Kokkos CMake path on a machine
# that only has Debian's Trilinos packaging. It exports what standalone Kokkos exports
# (Kokkos::kokkos, Kokkos_VERSION, Kokkos_DEVICES) and wraps Debian's Kokkos 3.4 libraries.
set(Kokkos_VERSION "${KKTRAIN_TEST_KOKKOS_VERSION}")
set(Kokkos_DEVICES SERIAL)
set(Kokkos_ENABLE_SERIAL ON)
if(NOT TARGET Kokkos::kokkos)
  add_library(Kokkos::kokkos INTERFACE IMPORTED)
  set(_lib /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
  set_target_properties(Kokkos::kokkos PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES /usr/include/trilinos
    INTERFACE_LINK_LIBRARIES
      "${_lib}/libtrilinos_kokkoscontainers.so;${_lib}/libtrilinos_kokkoscore.so;dl")
endif()
set(Kokkos_FOUND TRUE)
