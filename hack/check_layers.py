#!/usr/bin/env python3
"""Fails on an #include in src/ that goes up a layer.

The folders of src/ form one stack (README.md, "Source map"): a file may
include headers of its own folder and of the folders below it, never of a
folder above it or of a sibling on the same level, so that each layer can be
built, tested and understood without the ones on top of it.
"""
import pathlib
import re
import sys

# Lowest first. Folders on one level do not include each other.
# contract holds what controller, backends and node agree on (publish_context
# keys, the initiator IQN rule, CHAP rules): the backends follow it without
# knowing how a node attaches, so attach and backend share a level.
LAYERS = [
    {"common"},
    {"bridge", "contract"},
    {"attach", "backend"},
    {"controller", "agent", "node"},
    {"cli"},
    {"cmd"},
]
LEVEL = {folder: i for i, level in enumerate(LAYERS) for folder in level}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent / "src"
    problems = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cc"):
            continue
        folder = path.relative_to(root).parts[0]
        if folder not in LEVEL:
            problems.append(f"{path.relative_to(root.parent)}: folder src/{folder} has no layer in hack/check_layers.py")
            continue
        for match in INCLUDE.finditer(path.read_text()):
            target = match.group(1)
            if target not in LEVEL or target == folder:
                continue
            if LEVEL[target] >= LEVEL[folder]:
                line = path.read_text()[: match.start()].count("\n") + 1
                problems.append(f"{path.relative_to(root.parent)}:{line}: includes {target}/, "
                                f"which is not below src/{folder}")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
