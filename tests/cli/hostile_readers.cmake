# ---- hostile inputs to the readers: one ctest hostile.<case> per case (label "hostile") -------
# Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain target). tests/cli/
# test_hostile_readers.py: FIFOs where files are expected, a token corpus truncated or rewritten
# under a running job (1 and 2 ranks; a read error on one rank through tests/tools/fail_io.c),
# safetensors shards one byte off, data.path: []. The 2-rank parts run under mpirun (exit 77, a
# skip, without it).
foreach(case IN ITEMS fifo_model corpus_changed_1rank corpus_changed_2ranks
                      safetensors_exact_size data_path_empty many_files deep_json)
  add_test(NAME hostile.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hostile_readers.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hostile.${case} PROPERTIES LABELS hostile TIMEOUT 300
                       SKIP_RETURN_CODE 77
                       ENVIRONMENT "KKTRAIN_FAIL_IO_SO=$<TARGET_FILE:kktrain_fail_io>")
endforeach()
