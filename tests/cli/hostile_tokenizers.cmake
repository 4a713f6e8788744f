# A hostile tokenizer directory or chat data line (tests/cli/test_hostile_tokenizers.py, issue 47):
# deep JSON, directories and FIFOs as tokenizer files, post-processor ids that are no token, huge
# vocabulary ids, an eos_token that is no token, a regex past PCRE2's match limit. Each one line,
# exit 2. Label "hostile"; a few seconds a case.
foreach(case IN ITEMS chat_nesting not_files emitted_ids huge_ids eos_not_a_token regex_failure)
  add_test(NAME hostile.tokenizer_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hostile_tokenizers.py
                   $<TARGET_FILE:kktrain> ${case})
  set_tests_properties(hostile.tokenizer_${case} PROPERTIES LABELS hostile TIMEOUT 120)
endforeach()
