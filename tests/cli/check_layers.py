"""The production code's layers include only downwards. Each layer is a library whose CMake
target links the layers it may use (LAYERS below is that graph, with each layer's dependencies
transitive); an #include "L/..." from a file of layer K where L is not below K is a dependency
the link lines do not declare, and fails here with the file and line.

usage: check_layers.py REPO_ROOT
"""

import os
import re
import sys

# layer -> the layers it builds on (its CMake target's link libraries, directly or through them)
LAYERS = {
    "core": (),
    "parallel": ("core",),
    "text": ("core",),
    "ops": ("core",),
    "optim": ("core",),
    "io": ("core", "parallel"),
    "model": ("core", "ops", "parallel"),
    "apps/dataprep": ("core", "parallel", "io", "text"),
    "apps/eval": ("apps/dataprep", "core", "parallel", "io", "text", "ops", "model"),
    "apps/train": ("apps/eval", "apps/dataprep", "core", "parallel", "io", "text", "ops", "model", "optim"),
    "apps/cli": ("apps/train", "apps/eval", "apps/dataprep", "core", "parallel", "io", "text", "ops", "model",
                 "optim"),
}
# Generated into the build tree for apps/cli/main.cpp (`kktrain --version`).
GENERATED = {"apps/build_info.hpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of_include(path):
    """The layer an include path names, or None for a path outside the layers."""
    for layer in sorted(LAYERS, key=len, reverse=True):
        if path.startswith(layer + "/"):
            return layer
    return None


def main():
    root = sys.argv[1]
    problems, files = [], 0
    for layer, below in LAYERS.items():
        top = os.path.join(root, layer)
        if not os.path.isdir(top):
            problems.append(f"{layer}: no such folder")
            continue
        for d, _, names in os.walk(top):
            for n in sorted(names):
                if not n.endswith((".cpp", ".hpp")):
                    continue
                files += 1
                path = os.path.join(d, n)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) in GENERATED:
                            continue
                        other = layer_of_include(m.group(1))
                        if other is None and m.group(1).startswith("apps/"):
                            problems.append(f"{rel}:{no}: includes {m.group(1)}, in no layer")
                        elif other is not None and other != layer and other not in below:
                            problems.append(f"{rel}:{no}: {layer} includes {m.group(1)} "
                                            f"({other} is not below {layer})")
    for p in problems:
        print("FAIL: " + p)
    if not problems:
        print(f"ok: {files} files in {len(LAYERS)} layers include only downwards")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
