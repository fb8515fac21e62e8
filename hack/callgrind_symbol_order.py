#!/usr/bin/env python3
"""Writes a linker symbol-ordering file from callgrind outputs (issue #18).

    hack/callgrind_symbol_order.py PROGRAM_NAME CALLGRIND_OUT... > FILE

Lists, once each and in the order first seen, the (mangled: run valgrind
with --demangle=no) functions of the object whose path ends in PROGRAM_NAME
that ran in any of the outputs. hack/profile_symbol_order.sh runs it;
src/cmd/lean_link.cmake hands the result to lld (--symbol-ordering-file),
which places the code of those functions side by side.
"""
import re
import sys

NAMED = re.compile(r"^(ob|cob|fn|cfn)=\((\d+)\)(?: (.*))?$")


def functions(path, program):
    """The functions of `program` named in one callgrind output."""
    objects, names = {}, {}
    current_ob = None
    for line in open(path, errors="replace"):
        m = NAMED.match(line.rstrip("\n"))
        if not m:
            continue
        kind, ident, name = m.groups()
        if kind in ("ob", "cob"):
            if name:
                objects[ident] = name
            if kind == "ob":
                current_ob = objects.get(ident)
            continue
        if name:
            names[ident] = name
        # A callee (cfn) is named with its own object only when that differs;
        # keep fn entries, whose object is the current ob.
        if kind == "fn" and current_ob and current_ob.endswith(program):
            yield names[ident]


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    seen = set()
    for path in argv[2:]:
        for name in functions(path, argv[1]):
            if name not in seen:
                seen.add(name)
                print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
