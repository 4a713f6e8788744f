# ---- test hooks stay out of production code (tests/cli/check_test_hooks.py) ----------------------
# Included from tests/CMakeLists.txt. A scan of the sources, well under a second. Label "hooks".
add_test(NAME hooks.production_code
         COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_test_hooks.py
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(hooks.production_code PROPERTIES LABELS hooks TIMEOUT 60)
# The layers include only downwards (tests/cli/check_layers.py; the graph its CMake targets link).
add_test(NAME hooks.layers
         COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_layers.py
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(hooks.layers PROPERTIES LABELS hooks TIMEOUT 60)
