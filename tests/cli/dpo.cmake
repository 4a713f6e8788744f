# ---- preference training end to end (tests/cli/test_dpo.py) -------------------------------------
# Included from tests/CMakeLists.txt. Preference pairs through inputs/chat_tokenizer on a tiny
# model: PyTorch parity of every objective, the pair forms, split invariance (1 and 2 ranks),
# resume with the reference log-probabilities reused or recomputed, the rewards' sign, LoRA and
# safetensors exports, refusals. Exit 77 is a skip (no mpirun / h5py / torch).
foreach(case IN ITEMS parity forms split_invariance resume sign exports refusals)
  add_test(NAME dpo.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_dpo.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(dpo.${case} PROPERTIES LABELS "train;dpo" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
