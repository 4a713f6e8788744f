# ---- JSON text (core/json_text.hpp): metrics rows and `audit --json` parse whatever they hold ----
# Included from tests/CMakeLists.txt. tools/json_rows prints rows through the writers; the Python
# cases (tests/cli/test_json_text.py) parse them. Label "json"; well under a second a case.
add_executable(json_rows tools/json_rows.cpp)
target_link_libraries(json_rows PRIVATE kktrain::io kktrain::optim)
foreach(case IN ITEMS metrics_layout control_characters audit_tab_in_glob)
  add_test(NAME json.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_json_text.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs $<TARGET_FILE:json_rows>
                   ${case})
  set_tests_properties(json.${case} PROPERTIES LABELS json TIMEOUT 60)
endforeach()
