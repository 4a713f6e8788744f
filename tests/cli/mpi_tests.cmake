# ---- sharded training end to end: one ctest per case of tests/cli/test_mpi.py -------------------
# Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain target). Label "mpi". Each case
# launches `mpirun -np 1..3 --oversubscribe kktrain ...` on tiny models (~1-5 s a case; memory
# ~11 s); every launch has its own timeout inside the script. Exit 77 is a skip (no mpirun).
set(KKTRAIN_MPI_CASES
  # 1.-3. the same run on 1, 2, 3 ranks; reshard_after_forward; default bf16 and bf16 reduce
  trajectories reshard_after_forward nonblocking_collectives collectives_choice bf16_training
  # 4.-5. the reference's patterns and LoRA on 2 and 3 ranks; the per-rank audit
  patterns_sharded audit_world_size
  # 6. failures end the job promptly with one line
  fail_data_one_rank fail_batch_split fail_divergence fail_config
  # 7. peak RSS per rank; 8. the thread plan of each rank
  memory_per_rank threads_plan)
foreach(case IN LISTS KKTRAIN_MPI_CASES)
  add_test(NAME mpi.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_mpi.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(mpi.${case} PROPERTIES LABELS mpi TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
# A mixture of experts on 2 to 4 ranks (tests/cli/test_mpi_moe.py): experts FSDP-sharded or
# split by expert parallelism, the same trajectory as one rank; resume bit for bit and across
# layouts; refusals.
foreach(case IN ITEMS trajectories resume wire_dtype refusals)
  add_test(NAME mpi.moe_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_mpi_moe.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(mpi.moe_${case} PROPERTIES LABELS mpi TIMEOUT 240 SKIP_RETURN_CODE 77)
endforeach()
# Shard geometry and reduce precision at their edges (tests/cli/test_mpi_geometry.py): a model
# whose layer tensors leave the last ranks empty shards, 3 ranks vs 1; the bf16 and fp32 gradient
# reduce-scatter on 2 and 3 ranks bit for bit against one-rank gradients (~2 s a case).
foreach(case IN ITEMS empty_shards bf16_reduce_sum)
  add_test(NAME mpi.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_mpi_geometry.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(mpi.${case} PROPERTIES LABELS mpi TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
# Updates lost to bf16 rounding, sharded (tests/cli/test_mpi_lost_updates.py): the columns are the
# whole model's, the warning and its error mode once for all ranks.
foreach(case IN ITEMS lost_updates_sharded lost_updates_warning_sharded)
  add_test(NAME mpi.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_mpi_lost_updates.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(mpi.${case} PROPERTIES LABELS mpi TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
# The training step's host synchronizations (tests/cli/test_host_syncs.py): 2 a step on 1, 2 and 3
# ranks whatever the micro-batches; the collectives' own waits counted apart (~5 s a case); the
# kernels a step launches (launches).
foreach(case IN ITEMS syncs_one_rank syncs_sharded launches)
  add_test(NAME sync.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_host_syncs.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(sync.${case} PROPERTIES LABELS "mpi;sync" TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
