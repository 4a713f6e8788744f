# ---- final-logit soft-capping (model.final_logit_softcapping) -----------------------------------
# Included from tests/CMakeLists.txt after kktrain_add_parity. Parity of loss and every gradient
# against PyTorch with the cap on (tests/parity/torch_reference.py applies Gemma 2's
# cap * tanh(l / cap) in the logits' dtype): fp32 and bf16 compute, main and MTP heads, a cap
# that bites (init_std 0.1: logits up to ~3, cap 1), the bf16 case over loss chunks of 7 rows.
# Tolerances are check_grads.py's. fp32: loss 1e-5, gradients 2e-5 relative, tight because fp32
# kktrain and PyTorch differ only in the order of fp32 sums and tanh's last ulp (measured: loss
# 2.5e-8, gradients <= 1.3e-6 against float64). bf16 compute: gradients within 0.15 of float64
# and of autocast and within 3x autocast's own error (measured: <= 1.9e-2, ratio <= 1.39);
# parity.head_rounding_softcap below is the sharp test of the rounding points.
# ~1-2 s each. Then the files and formats the cap travels in (tests/cli/test_softcap.py).
kktrain_add_parity(f32.softcap_mtp1_t17 ${KKTRAIN_PARITY_F32} model.final_logit_softcapping=1.0
                   model.init_std=0.1 model.mtp_num_layers=1 data.seq_len=17)
kktrain_add_parity(bf16compute.softcap_mtp1_chunks7 ${KKTRAIN_PARITY_BF16COMPUTE}
                   model.final_logit_softcapping=1.0 model.init_std=0.1 model.mtp_num_layers=1
                   model.loss_chunk_tokens=7)
foreach(case IN ITEMS files hf_refusals)
  add_test(NAME cli.softcap_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_softcap.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(cli.softcap_${case} PROPERTIES LABELS cli TIMEOUT 120)
endforeach()
# The head's gradients with the cap against a PyTorch model rounding at kktrain's rounding points
# (tests/parity/check_head_rounding.py: z, dz and dlogits each rounded to bf16 once).
kktrain_add_head_rounding(softcap model.init_std=0.2 model.final_logit_softcapping=2.0)
