"""Production code holds no test hooks (issue 34): the process-wide seams tests flip live in
namespace test_hooks, declared in *_testing.hpp headers that only tests and bench/ include. In the
production folders this checks that
  - no file includes a *_testing.hpp, except X.cpp including its own X_testing.hpp (the file that
    defines those hooks, so the compiler checks them against their declarations);
  - no file calls test_hooks:: (only defines it);
  - no file reads a KKTRAIN_TEST_* variable (limits are option structs: GemmOptions::limits,
    MpiLimits, TokenLoadOptions);
  - no file reads the environment (getenv) except the files in GETENV_ALLOWED, for what the
    process inherits from its launcher: thread counts and wait policies (OMP_*, OPENBLAS_*,
    KOKKOS_NUM_THREADS, parallel/threads.cpp) and the MPI launcher's variables
    (parallel/mpi_communicator.cpp). A run's choices are config keys or option structs passed in
    (issue 48: model.attention, model.attention_tiles, model.gemm, model.gemm_fp32,
    data.validate_at_load_tokens, train.memory_available_bytes; GemmOptions, AttentionOptions).

usage: check_test_hooks.py REPO_ROOT
"""

import os
import re
import sys

PRODUCTION = ("apps", "core", "io", "model", "ops", "optim", "parallel", "text")
# Files that may read inherited environment variables (see above).
GETENV_ALLOWED = ("parallel/threads.cpp", "parallel/mpi_communicator.cpp")
GETENV = re.compile(r"\bgetenv\s*\(")
INCLUDE = re.compile(r'#include\s+"([^"]*_testing\.hpp)"')
CALL = re.compile(r"\btest_hooks::\w+\s*\(")
COMMENT = re.compile(r"//.*")


def problems_of(path, rel):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    stem = os.path.splitext(os.path.basename(path))[0]
    found = []
    for inc in INCLUDE.findall(text):
        if not (path.endswith(".cpp") and os.path.basename(inc) == stem + "_testing.hpp"):
            found.append(f"{rel} includes {inc}")
    if CALL.search(COMMENT.sub("", text)):
        found.append(f"{rel} calls test_hooks::")
    if "KKTRAIN_TEST_" in text:
        found.append(f"{rel} names a KKTRAIN_TEST_ variable")
    if rel.replace(os.sep, "/") not in GETENV_ALLOWED and GETENV.search(COMMENT.sub("", text)):
        found.append(f"{rel} reads the environment (getenv): pass the choice in instead")
    return found


def main():
    root = sys.argv[1]
    problems, files = [], 0
    for top in PRODUCTION:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if n.endswith((".cpp", ".hpp")) and not n.endswith("_testing.hpp"):
                    files += 1
                    path = os.path.join(d, n)
                    problems += problems_of(path, os.path.relpath(path, root))
    for p in problems:
        print("FAIL: " + p)
    if files == 0:
        print("FAIL: no production source found under " + root)
        return 1
    if not problems:
        print(f"ok: {files} production files, no test hooks")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
