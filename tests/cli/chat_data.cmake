# ---- examples data: `kktrain render` (apps/dataprep/example_renderer.hpp, apps/cli/cmd_render.cpp) ------------------
# Included from tests/CMakeLists.txt. tests/cli/test_chat_data.py checks rendered text (against
# jinja2), ids and loss masks (against Hugging Face's `tokenizers` under KKTRAIN_NPM_DIR; those
# cases skip with 77 without it), prompt/completion, truncation, the template's source order and
# every refusal. Label "chat".
foreach(case IN ITEMS reference_llama3 reference_gemma3 reference_qwen3 reference_llama2 reference_handwritten
                      prompt_completion
                      truncation template_order errors normalized_masks)
  add_test(NAME chat.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_chat_data.py
                   $<TARGET_FILE:kktrain> ${KKTRAIN_NPM_DIR} ${case})
  set_tests_properties(chat.${case} PROPERTIES LABELS chat TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
# ExampleRenderer on several threads at once (tests/unit/test_chat_data.cpp).
kktrain_add_gtest(test_chat_data SOURCES unit/test_chat_data.cpp LIBS kktrain_dataprep)
