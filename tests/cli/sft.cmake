# ---- supervised fine-tuning end to end (tests/cli/test_sft.py) ----------------------------------
# Included from tests/CMakeLists.txt. Chat examples through inputs/chat_tokenizer on a tiny model:
# split invariance of the token-weighted loss (1, 2, 4 ranks), packed = unpacked, epochs and
# mid-epoch resume (1 and 2 ranks), validation, refusals. Exit 77 is a skip (no mpirun / h5py).
foreach(case IN ITEMS split_invariance packed_equals_unpacked epochs_resume validation refusals)
  add_test(NAME sft.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_sft.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(sft.${case} PROPERTIES LABELS "train;sft" TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
