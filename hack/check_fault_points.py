#!/usr/bin/env python3
"""Fails when a fault point named in src/ is not listed in docs/testing.md or
not armed by any test, or when the docs or the kill -9 matrix name a point
that src/ no longer has.

A fault point (src/common/fault_points.h) is named where it is reached:
  - as the first argument of FaultPoint("...") or of a component's
    Fault("...") wrapper, or
  - in the brace initializer of a `...Points` struct that carries whole
    names to a shared step (Pool::PlaceImagePoints, AtomicWritePoints).
A first argument that is neither a string literal nor a plain name passed
through (a forwarding wrapper's parameter) is refused: a name built from
pieces ("controller." + op) cannot be found by reading the source, which is
how the docs and the tests drifted from the code before this check.

The local backend's points run in the plugin as controller.* and in
blockcsi-target as agent.* (FaultPointScope): an agent.* name in the docs or
a test stands for its controller.* name.

"Armed by a test": the name appears as a string literal in a file under
test/ (not test/fault/fault_points_test.cc, which tests the naming rules
only). The tests themselves assert that an armed point was reached (the
kill -9 matrix fails a row whose process did not die there).

Usage: hack/check_fault_points.py [repo-dir]   (prints problems; exit 1)
       hack/check_fault_points.py --self-test
"""
import pathlib
import re
import sys

COMPONENTS = ("controller", "agent", "node", "rbd")
NAME = re.compile(r"^(%s)\.[a-z0-9_-]+\.[a-z0-9_-]+$" % "|".join(COMPONENTS))
CALL = re.compile(r"\b(?:FaultPoint|Fault)\(")
POINTS_INIT = re.compile(r"\b\w*Points\s*(?:\w+\s*)?\{([^{}]*)\}")
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
# A name passed through: `point`, `points.staged`, `(*options->fault_points).*step`.
PASSED_THROUGH = re.compile(r"^[\w.:>()*\[\]-]+$")
# A declaration's parameter list: `std::string_view point`, `const FaultHook& hook = {}`.
DECLARATION = re.compile(r"^(const\s+)?[\w:<>]+\s*[&*]?\s+\w+(\s*=.*)?(,.*)?$", re.S)
# Files that define the seam (their FaultPoint( is its declaration).
SEAM_FILES = {"common/fault_points.h", "common/fault_points.cc"}
NOT_ARMING = {"test/fault/fault_points_test.cc"}
MATRIX = "test/fault/fault_matrix_test.cc"
DOC = "docs/testing.md"


def strip_comments(text):
    """Whole-line // comments out (names in prose are not points)."""
    return "\n".join("" if line.lstrip().startswith("//") else line for line in text.split("\n"))


def first_argument(text, open_paren):
    """The text of the first argument of the call whose '(' is at open_paren."""
    depth, i, quoted = 0, open_paren + 1, False
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return text[open_paren + 1 : i]
            depth -= 1
        elif c == "," and depth == 0:
            return text[open_paren + 1 : i]
        i += 1
    return text[open_paren + 1 :]


def points_in_source(files):
    """{name: [where]} and [problems] from {relative path: text} of src/."""
    names, problems = {}, []
    for rel, raw in sorted(files.items()):
        if rel in SEAM_FILES:
            continue
        text = strip_comments(raw)
        for m in CALL.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            arg = first_argument(text, m.end() - 1).strip()
            lit = re.fullmatch(LITERAL.pattern, arg)
            if lit:
                if not NAME.match(lit.group(1)):
                    problems.append(f"src/{rel}:{line}: fault point \"{lit.group(1)}\" is not <component>.<op>.<step>")
                names.setdefault(lit.group(1), []).append(f"src/{rel}:{line}")
            elif not arg or DECLARATION.match(arg) or PASSED_THROUGH.match(arg):
                continue
            else:
                problems.append(
                    f"src/{rel}:{line}: fault point name built from pieces ({arg}); write the whole name as a literal"
                )
        for m in POINTS_INIT.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            for lit in LITERAL.finditer(m.group(1)):
                if NAME.match(lit.group(1)):
                    names.setdefault(lit.group(1), []).append(f"src/{rel}:{line}")
    return names, problems


def canonical(name):
    """agent.<op>.<step> is the local backend's controller.<op>.<step> in blockcsi-target."""
    return "controller." + name.split(".", 1)[1] if name.startswith("agent.") else name


def doc_section(doc):
    """The '## Fault points' section of docs/testing.md."""
    m = re.search(r"^## Fault points\n(.*?)(?=^## )", doc, re.S | re.M)
    return m.group(1) if m else ""


def check(src_files, doc, test_files):
    names, problems = points_in_source(src_files)
    if not names:
        problems.append("no fault point found in src/ (has the seam changed? update hack/check_fault_points.py)")
    section = doc_section(doc)
    if not section:
        problems.append(f"{DOC} has no '## Fault points' section")
    documented = {canonical(n) for n in re.findall(r"`([a-z0-9_.-]+)`", section) if NAME.match(n)}
    armed = {}
    for rel, text in test_files.items():
        if rel in NOT_ARMING:
            continue
        for lit in LITERAL.findall(text):
            if NAME.match(lit):
                armed.setdefault(canonical(lit), set()).add(rel)
    for name in sorted(names):
        where = names[name][0]
        if name not in documented:
            problems.append(f"{name} ({where}) is not listed in {DOC} (section 'Fault points')")
        if name not in armed:
            problems.append(f"{name} ({where}) is armed by no test (no string literal naming it under test/)")
    for name in sorted(documented - set(names)):
        problems.append(f"{DOC} lists {name}, which src/ does not reach")
    for lit in sorted(set(LITERAL.findall(strip_comments(test_files.get(MATRIX, ""))))):
        if NAME.match(lit) and canonical(lit) not in names:
            problems.append(f"{MATRIX} arms {lit}, which src/ does not reach")
    return names, problems


def read_tree(root, sub, suffixes):
    base = root / sub
    return {
        str(p.relative_to(base if sub == "src" else root)): p.read_text(errors="replace")
        for p in sorted(base.rglob("*"))
        if p.suffix in suffixes and p.is_file()
    }


def self_test():
    """Each kind of drift must be reported; a consistent tree must not be."""
    doc = "## Fault points\n| node | `node.stage.after-a`, `agent.create.after-b` |\n## Next\n"
    good_src = {
        "node/a.cc": 'Status s = Fault("node.stage.after-a").WithContext("v " + id);\n',
        "backend/b.cc": "Status B::Fault(std::string_view point) const { return FaultPoint(point, hook_); }\n"
        'void C() { Fault("controller.create.after-b"); }\n',
    }
    tests = {"test/x_test.cc": 'Arm("node.stage.after-a"); Arm("agent.create.after-b");\n'}
    cases = {
        "consistent": (good_src, doc, tests, []),
        "new point": (
            {**good_src, "node/c.cc": 'Fault("node.expand.after-c");\n'},
            doc,
            tests,
            ["node.expand.after-c (src/node/c.cc:1) is not listed", "node.expand.after-c (src/node/c.cc:1) is armed by no test"],
        ),
        "struct of points": (
            {**good_src, "attach/d.cc": 'constexpr AtomicWritePoints kP{"node.record.temp-written", "x"};\n'},
            doc,
            tests,
            ["node.record.temp-written (src/attach/d.cc:1) is not listed"],
        ),
        "composed name": (
            {**good_src, "backend/e.cc": 'Fault("controller." + op + ".image-placed");\n'},
            doc,
            tests,
            ["built from pieces"],
        ),
        "stale doc": (
            {"node/a.cc": good_src["node/a.cc"]},
            doc,
            tests,
            ["lists controller.create.after-b, which src/ does not reach"],
        ),
        "comment is not a point": (
            {**good_src, "node/f.cc": '  // Fault("node.gone.after-f") used to be here\n'},
            doc,
            tests,
            [],
        ),
        "only the naming test": (
            good_src,
            doc,
            {"test/fault/fault_points_test.cc": tests["test/x_test.cc"]},
            ["node.stage.after-a (src/node/a.cc:1) is armed by no test"],
        ),
    }
    failed = 0
    for label, (src, d, t, want) in cases.items():
        _, problems = check(src, d, t)
        missing = [w for w in want if not any(w in p for p in problems)]
        extra = problems if not want else []
        if missing or extra or (want and len(problems) < len(want)):
            failed += 1
            print(f"self-test {label}: want {want}, got {problems}")
    print(f"self-test: {len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src = read_tree(root, "src", {".cc", ".h"})
    tests = read_tree(root, "test", {".cc", ".h"})
    doc = (root / DOC).read_text()
    names, problems = check(src, doc, tests)
    for p in problems:
        print(p)
    print(f"check_fault_points: {len(names)} fault points in src/, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
