# Optimizer correctness (ctest label "optim"): kktrain's optimizers, driven step by step through
# tests/tools/optim_runner, against torch.optim (torch 1.13, single-tensor path) and against NumPy
# emulations of the semantics in docs/precision.md. One ctest per case of
# tests/optim/check_optim.py; measurements and tolerances: tests/optim/README.md. optim.perturbed
# runs every case with a wrong reference and passes only if every case fails (each test can fail).
set(KKTRAIN_OPTIM_CASES
  adamw_fp32 adam_fp32 sgd_fp32 adam_bf16_torch adam_bf16_emulation fused_master fused_l2
  fused_no_bias_correction fused_bf16_moments remainders wd_exclude grad_scale frozen
  sr_deterministic sr_unbiased sr_fresh_bits sr_element_unbiased sr_off)
foreach(case IN LISTS KKTRAIN_OPTIM_CASES)
  add_test(NAME optim.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/optim/check_optim.py
                   --runner $<TARGET_FILE:optim_runner> ${case})
  set_tests_properties(optim.${case} PROPERTIES LABELS optim TIMEOUT 120)
endforeach()
add_test(NAME optim.perturbed
         COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/optim/check_optim.py
                 --runner $<TARGET_FILE:optim_runner> --perturb ${KKTRAIN_OPTIM_CASES})
set_tests_properties(optim.perturbed PROPERTIES LABELS optim TIMEOUT 300)
