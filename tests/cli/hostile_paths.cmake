# ---- every option that names a file, given a FIFO, a directory or a device (issue 47) -----------
# Included from tests/CMakeLists.txt (KKTRAIN_PYTHON, the kktrain target). tests/cli/
# test_hostile_paths.py: each config key and command-line option whose value is a path (listed in
# the test, which fails on a string key of `kktrain config --schema` or an option of a command's
# --help that it does not list), and the files found beside them (tokenizer.json,
# tokenizer_config.json, chat_template.jinja, adapter_config.json), given a FIFO, a directory,
# /dev/null or /dev/zero: each command ends within seconds, non-zero, with one error line naming
# the file. Label "hostile".
foreach(case IN ITEMS config_keys command_options coverage)
  add_test(NAME hostile.paths_${case}
           COMMAND ${KKTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_hostile_paths.py
                   $<TARGET_FILE:kktrain> ${PROJECT_SOURCE_DIR}/inputs ${case})
  set_tests_properties(hostile.paths_${case} PROPERTIES LABELS hostile TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
