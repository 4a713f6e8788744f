# ---- chat templates against jinja2 (text/jinja.hpp) ----------------------------------------------
# Included from tests/CMakeLists.txt. tests/cli/test_chat_templates.py renders each template over a
# set of conversations through render_chat (kktrain::text) and through Debian's python3-jinja2 set
# up as transformers' apply_chat_template (tests/text/render_reference.py), byte for byte; the npm
# tokenizers' templates (KKTRAIN_NPM_DIR, as tokenizer_reference_tests.cmake) skip when absent.
add_executable(render_chat text/render_chat.cpp)
target_link_libraries(render_chat PRIVATE kktrain::text kktrain::json)
target_include_directories(render_chat PRIVATE ${PROJECT_SOURCE_DIR})
set_property(GLOBAL APPEND PROPERTY KKTRAIN_UNIT_TARGETS render_chat)
foreach(case IN ITEMS constructs expressions errors spans llama3 gemma3 qwen3)
  add_test(NAME text.chat_template_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_chat_templates.py
                   $<TARGET_FILE:render_chat> ${KKTRAIN_NPM_DIR} ${case})
  # Also "unit": CI's sanitizer build runs them (the renderer is C++ that only these reach).
  set_tests_properties(text.chat_template_${case} PROPERTIES LABELS "text;unit" TIMEOUT 60
                       SKIP_RETURN_CODE 77)
endforeach()
