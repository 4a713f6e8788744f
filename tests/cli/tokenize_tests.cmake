# `kktrain tokenize` end to end (tests/cli/test_tokenize.py): llm.c shards (uint16 / uint32 by the
# vocabulary, val shard, splitting, the same bytes for any thread count) against a Python writer
# fed with `kktrain tokenize --ids`, a byte-fallback tokenizer, every error path. Tokenizers are
# tiny tokenizer.json files the test writes. Label "tokenize".
foreach(case IN ITEMS shards_uint16 shards_uint32 byte_fallback errors memory_bounded signals
                     decode_nul val_boundary shard_boundary out_dirs)
  add_test(NAME tokenize.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_tokenize.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(tokenize.${case} PROPERTIES LABELS tokenize TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
# The shard writer alone (tests/unit/test_token_shards.cpp): headers, splitting, read back through
# TokenFile, a failed write (RLIMIT_FSIZE) keeps no shard.
kktrain_add_gtest(test_token_shards SOURCES unit/test_token_shards.cpp LIBS kktrain::io)
