# ---- training checkpoints end to end: one ctest ckpt.<case> per case (label "checkpoint") ------
# Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain target). The cases train tiny
# models (tests/cli/test_train.py) into temporary directories; *_2ranks, resume_other_rank_count
# and parts of kill_during_save / corruption run under mpirun (exit 77, a skip, without it).
# tests/cli/test_checkpoint.py: resume, rank counts, SIGKILL during saves, signals.
foreach(case IN ITEMS resume_exact_1rank resume_exact_2ranks resume_other_rank_count
                      kill_during_save keep_last_bound kill_during_resave signals_1rank
                      signals_2ranks)
  add_test(NAME ckpt.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_checkpoint.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
endforeach()
# tests/cli/test_checkpoint_files.py: damaged files, kktrain export, model.init_from, inspect.
foreach(case IN ITEMS corruption export init_from inspect)
  add_test(NAME ckpt.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_checkpoint_files.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
endforeach()
set(KKTRAIN_CKPT_TESTS ckpt.resume_exact_1rank ckpt.resume_exact_2ranks
    ckpt.resume_other_rank_count ckpt.kill_during_save ckpt.keep_last_bound
    ckpt.kill_during_resave ckpt.signals_1rank ckpt.signals_2ranks ckpt.corruption ckpt.export
    ckpt.init_from ckpt.inspect)
set_tests_properties(${KKTRAIN_CKPT_TESTS} PROPERTIES LABELS checkpoint TIMEOUT 300
                     SKIP_RETURN_CODE 77)
