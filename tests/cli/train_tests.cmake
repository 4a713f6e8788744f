# ---- end-to-end `kktrain train` / `kktrain audit`: one ctest per case of tests/cli/test_train.py
# Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain target). Label "train". Each case
# trains or audits a ~20k-parameter model on 32-token sequences in a temporary output directory
# (~0.1-1 s a case; the label runs in a few seconds). Exit 77 is a skip (mpirun not installed).
set(KKTRAIN_TRAIN_CASES
  # 1. a full run: metrics.jsonl rows, validation rows, loss goes down, lr schedule bit-exact
  full_run log_cadence lr_schedule_variants
  # 2.-3. determinism (bit-identical metrics, also across Kokkos thread counts), accumulation
  determinism thread_counts metrics_kept finished_run_again grad_accumulation
  # 4. the precision patterns of docs/precision.md, the precision warning and its error mode
  pattern_a pattern_b pattern_risky pattern_risky_fail patterns_consistent
  # 5. non-finite loss / gradient norm: skipped steps, then exit 1
  nonfinite_grad_norm nonfinite_loss
  # 7. bad data: exit 2, one stderr line, nothing written
  data_missing data_empty data_directory data_short data_vocab data_binary
  # 9. --help
  train_help audit_help)
foreach(case IN LISTS KKTRAIN_TRAIN_CASES)
  add_test(NAME train.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_train.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(train.${case} PROPERTIES LABELS train TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()

# kktrain audit: the three patterns (JSON and table), freezing (tests/cli/test_audit.py)
foreach(case IN ITEMS audit_pattern_a audit_pattern_b audit_pattern_peaks audit_risky audit_table
                      audit_freeze_modules
                      audit_freeze_parameters audit_unfreeze_parameters audit_freeze_tied_alias
                      audit_freeze_unknown audit_moe)
  add_test(NAME train.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_audit.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(train.${case} PROPERTIES LABELS train TIMEOUT 120)
endforeach()

# LoRA adapters end to end (tests/cli/test_lora.py, built on test_train.py's helpers).
foreach(case IN ITEMS lora_audit_dtypes lora_train lora_bad_targets)
  add_test(NAME train.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_lora.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(train.${case} PROPERTIES LABELS train TIMEOUT 120)
endforeach()

# The training loop end to end (tests/cli/test_loop.py): the global batch is the same run however
# it is split into micro-batches, weight-decay exclusion through a tied alias, mtp_loss and
# val_loss as means, gradient clipping scaling the step.
foreach(case IN ITEMS loop_global_batch_invariance loop_weight_decay_exclude_alias
                      loop_mtp_loss_mean loop_val_batches_mean loop_grad_clip_end_to_end)
  add_test(NAME train.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_loop.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(train.${case} PROPERTIES LABELS train TIMEOUT 120)
endforeach()

# Updates lost to bf16 rounding as training reports them (tests/cli/test_lost_updates.py): the
# metrics columns per pattern, counting leaving the run unchanged, the runtime warning, its error
# mode and config keys.
foreach(case IN ITEMS lost_update_columns lost_update_counting_changes_nothing
                      lost_update_warning lost_update_fail lost_update_config)
  add_test(NAME train.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_lost_updates.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(train.${case} PROPERTIES LABELS train TIMEOUT 120)
endforeach()

# The predicted training peak against the measured one (tests/cli/test_memory.py; docs/memory.md):
# d 512, 8 layers, T 256, B 8, 2 steps per run. peaks_fp32_bf16 takes ~50 s on two busy cores
# (fp32 GEMMs), peaks_frozen ~12 s, out_of_memory well under a second; long_context and
# large_vocab (the default model at B 1, T up to 4096) ~30 s each.
foreach(case IN ITEMS peaks_fp32_bf16 peaks_frozen peaks_families out_of_memory long_context
                      large_vocab)
  add_test(NAME train.memory_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_memory.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(train.memory_${case} PROPERTIES LABELS train TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()

# Hugging Face directories end to end (tests/cli/test_hf.py): config.json into the config, every
# malformed directory refused, the safetensors export (round trip, shards, kills), generate's
# command line. Label "hf"; export_killed trains nothing but writes a 50 MB model 13 times.
foreach(case IN ITEMS config_from_file config_v5 refusals roundtrip export_shards export_killed generate_cli)
  add_test(NAME hf.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hf.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hf.${case} PROPERTIES LABELS hf TIMEOUT 300)
endforeach()
# Mixtral directories (tests/cli/test_hf_moe.py): the sparse MLP's keys and names, parity of the
# imported model, train + export + re-import bit for bit, refusals.
foreach(case IN ITEMS import roundtrip refusals)
  add_test(NAME hf.mixtral_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hf_moe.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hf.mixtral_${case} PROPERTIES LABELS hf TIMEOUT 300)
endforeach()
# Qwen2, Qwen3, Mistral, SmolLM3, Qwen3-MoE, Gemma 2/3, OLMo 2 and Phi-3 directories
# (tests/cli/test_hf_families.py): train + export with the input's names, shapes and config.json
# keys, re-import bit for bit; resume exact on 1 and 2 ranks (mpirun; exit 77, a skip, without
# it) and from 2 ranks on 1; LoRA on q/k/v/o (Phi-3: qkv_proj, o_proj, gate_up_proj) with PEFT's
# names and the biases and q/k norms frozen; chat fine-tuning with the family's tokenizer and
# template; config.json values and exports refused in one line.
# Hidden 64, 2 layers, 32-token sequences: ~3-14 s a case on two busy cores.
foreach(case IN ITEMS roundtrip_qwen2 roundtrip_qwen3 roundtrip_mistral roundtrip_smollm3
                      roundtrip_qwen3_moe roundtrip_gemma2 roundtrip_gemma3 roundtrip_olmo2
                      roundtrip_phi3 conditional_gemma3 resume_qwen2 resume_qwen3 resume_gemma3
                      resume_gemma2 resume_olmo2 resume_phi3 resume_more lora_qwen2 lora_qwen3 lora_gemma3
                      lora_phi3 lora_more sft_gemma3 sft_qwen3 fresh_norms refusals)
  add_test(NAME hf.family_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hf_families.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hf.family_${case} PROPERTIES LABELS hf TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
# A Hugging Face directory (Llama, Qwen2, Qwen3, Mistral, Qwen3-MoE, SmolLM2/3, Gemma 2, Gemma 3,
# OLMo 2, Phi-3, Phi-4-mini) against an independent PyTorch model loaded from the same files
# (tests/hf/check_hf_parity.py): weights, loss, every gradient, greedy generation.
# One test per family group, its cases in one process (PyTorch's import, ~3 s, is most of a
# case's time): GROUP:CASE,CASE,...
set(KKTRAIN_HF_PARITY_GROUPS
    llama:f32_tied_single_llama3,f32_untied_sharded,bf16_untied_single,bf16_tied_sharded_llama3
    llama_dtypes:f16_into_f32,f32_into_bf16,smollm2_f32
    qwen2:qwen2_f32_tied,qwen2_bf16_untied,qwen2_f32_window_layers
    qwen3:qwen3_f32_untied_head_dim,qwen3_bf16_tied_bias,qwen3_f32_layer_types
    mistral:mistral_f32_window,mistral_bf16_window
    qwen3_moe:qwen3_moe_f32,qwen3_moe_bf16_no_norm
    smollm3:smollm3_f32_no_rope_layers,smollm3_bf16_interval
    gemma2:gemma2_f32,gemma2_bf16
    gemma3:gemma3_f32,gemma3_bf16_conditional,gemma3_f32_conditional_hub
    olmo2:olmo2_f32,olmo2_bf16
    phi3:phi3_f32,phi4mini_bf16)
foreach(group IN LISTS KKTRAIN_HF_PARITY_GROUPS)
  string(REPLACE ":" ";" parts "${group}")
  list(GET parts 0 name)
  list(GET parts 1 cases)
  string(REPLACE "," ";" cases "${cases}")
  add_test(NAME hf.parity_${name}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/hf/check_hf_parity.py
                   $<TARGET_FILE:kktrain> ${cases})
  set_tests_properties(hf.parity_${name} PROPERTIES LABELS "hf;parity" TIMEOUT 300)
endforeach()
# Token corpora of any size (tests/cli/test_data_files.py): peak RSS on a 3 GiB sparse file vs a
# 30 MiB one, llm.c shards, lists and globs on 1 and 2 ranks, ids checked as windows are drawn,
# a Hugging Face directory loaded on 2 ranks. Label "data".
foreach(case IN ITEMS rss_3gib llmc lists_two_ranks ids_at_draw_two_ranks hf_two_ranks)
  add_test(NAME data.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_data_files.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(data.${case} PROPERTIES LABELS data TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()

# TensorBoard event files read back by an independent reader (python3-crcmod's CRC-32C, the
# protobuf fields decoded by hand), every value equal to its metrics.jsonl row's.
add_test(NAME train.tensorboard_events
         COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_tensorboard.py
                 $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs events)
set_tests_properties(train.tensorboard_events PROPERTIES LABELS train TIMEOUT 120
                     SKIP_RETURN_CODE 77)
