# ---- LoRA adapters in PEFT's format (io/peft.hpp) ------------------------------------------------
# Included from tests/CMakeLists.txt. tests/cli/test_peft.py: `kktrain export --format peft`,
# checkpoint.export_format: peft, peft.init_from; the files read from the formats' descriptions
# (tests/hf/hf_files.py), the merge and the forward checked against PyTorch (float64). Label "peft".
foreach(case IN ITEMS export merged roundtrip refusals own_output init_only regex
                     export_readme export_symlink export_stale_dir)
  add_test(NAME peft.${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_peft.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(peft.${case} PROPERTIES LABELS peft TIMEOUT 120 SKIP_RETURN_CODE 77)
endforeach()
# The cleanup of killed exports' temporaries beside an output and the symbolic-link target of a
# directory export (tests/unit/test_durable.cpp; io/durable.hpp).
kktrain_add_gtest(test_durable SOURCES unit/test_durable.cpp LIBS kktrain::io)
