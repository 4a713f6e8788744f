# ---- hostile training data (issue 47): one ctest hostile_data.<case> per case of
# tests/cli/test_hostile_data.py. Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain
# target). Label "hostile". Empty examples, caches keyed on content, inputs inside the run's cache
# directories, epochs planned lazily, linear loss masks, messages, validation on 1-3 ranks.
foreach(case IN ITEMS empty_example cache_content cache_inputs epochs_lazy masking_linear messages
                      val_ranks)
  add_test(NAME hostile_data.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hostile_data.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hostile_data.${case} PROPERTIES LABELS hostile TIMEOUT 180
                       SKIP_RETURN_CODE 77)
endforeach()
