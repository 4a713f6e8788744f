# ---- every global fence of a training step is a wait kktrain reports (issue 34) ----------------
# Included from tests/CMakeLists.txt. tests/tools/fence_counter.cpp is a Kokkos Tools library that
# counts the global fences inside each step (the "kktrain_step" profile region); the cases of
# tests/cli/test_fence_counts.py compare them with metrics.jsonl's host_syncs + collective, on 1
# and 2 ranks (~2 s a case). Exit 77 is a skip (no mpirun).
add_library(kktrain_fence_counter MODULE tools/fence_counter.cpp)
target_link_libraries(kktrain_fence_counter PRIVATE kktrain::kokkos ${CMAKE_DL_LIBS})
foreach(case IN ITEMS one_rank two_ranks)
  add_test(NAME sync.fences_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_fence_counts.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(sync.fences_${case} PROPERTIES LABELS "mpi;sync" TIMEOUT 120
                       SKIP_RETURN_CODE 77
                       ENVIRONMENT "KKTRAIN_FENCE_COUNTER=$<TARGET_FILE:kktrain_fence_counter>")
endforeach()
