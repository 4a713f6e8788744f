# ---- a stopped rank (SIGSTOP) ends the job after distributed.stuck_peer_wait_s (issue 47) -------
# Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain target). tests/cli/
# test_stopped_peer.py: the last rank of tests/tools/mpi_stopped_peer.cpp stops itself before a
# collective the others wait in (the ring's reduce-scatter both ways, the library's all-gather,
# all-to-all, barrier, ...), and rank 1 of a 2-rank `kktrain train` is stopped mid-run: one line
# naming the stopped rank within the wait plus a margin, the waiting ranks under 30% of a core; a
# rank busy alone for twice the wait does not end the job.
# Under mpirun (exit 77, a skip, without it). Label "safety".
add_executable(mpi_stopped_peer tools/mpi_stopped_peer.cpp)
target_link_libraries(mpi_stopped_peer PRIVATE kktrain::parallel)
foreach(case IN ITEMS collectives busy_rank train)
  add_test(NAME safety.stopped_peer_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_stopped_peer.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs
                   $<TARGET_FILE:mpi_stopped_peer> ${case})
  set_tests_properties(safety.stopped_peer_${case} PROPERTIES LABELS safety TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
