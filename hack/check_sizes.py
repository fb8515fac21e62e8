#!/usr/bin/env python3
"""Fails, naming each file, when a source file in src/ has more than 600 lines.

A file that size holds more than one thing; split it by what it holds into
sibling files (issue #16) rather than raising the limit.
"""
import pathlib
import sys

MAX_LINES = 600


def main() -> int:
    root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "src"
    problems = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cc") or not path.is_file():
            continue
        with path.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES:
            problems.append(f"{path}: {lines} lines, more than {MAX_LINES}; split it by what it holds")
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
