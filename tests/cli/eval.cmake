# ---- kktrain eval end to end (tests/cli/test_eval.py) -------------------------------------------
# Included from tests/CMakeLists.txt. A tiny byte-level fp32 model trained for 20 steps, evaluated
# on inputs/eval_example_tasks.jsonl and text / jsonl / token files against the float64 PyTorch
# reference of lm-evaluation-harness's rules (tests/parity/eval_reference.py); the same figures on
# 2 ranks; eval.every's rows equal to kktrain eval of the step's checkpoint and to the run's
# validation loss; refusals naming FILE:LINE. ~2-5 s a case. Exit 77 is a skip (no torch / h5py / mpirun).
foreach(case IN ITEMS parity ranks training refusals)
  set(labels "train;eval")
  if(case STREQUAL "ranks")
    set(labels "train;eval;mpi")
  endif()
  add_test(NAME eval.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_eval.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(eval.${case} PROPERTIES LABELS "${labels}" TIMEOUT 180
                       SKIP_RETURN_CODE 77)
endforeach()
