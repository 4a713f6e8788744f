# ---- run directories under hostile use (issue 33): one ctest hostile.<case> per case of
# tests/cli/test_hostile_runs.py. Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain
# target). Label "hostile". Exports into the checkpoint root, `latest` naming a damaged step
# directory, pruning beside a user's files, temporaries of killed exports, and the end of a run's
# needs checked before its first step; tiny models, a few seconds a case.
foreach(case IN ITEMS export_into_checkpoint_root damaged_latest prune_foreign_files
                      stale_temporaries preflight)
  add_test(NAME hostile.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hostile_runs.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hostile.${case} PROPERTIES LABELS hostile TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
