# Hostile model files (tests/cli/test_hostile_models.py, issue 33): generate refuses every
# directory model.init_from refuses with the same line; non-finite weights (1 and 2 ranks);
# messages that name the problem (2 ranks: once); resuming a checkpoint of the other MLP kind;
# every exported value read back at its extremes.
foreach(case IN ITEMS generate_like_init_from nonfinite messages resume_other_kind
                     export_extremes)
  add_test(NAME hostile.models_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hostile_models.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hostile.models_${case} PROPERTIES LABELS hostile TIMEOUT 300)
endforeach()
