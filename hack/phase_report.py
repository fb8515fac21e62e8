#!/usr/bin/env python3
"""The end of hack/test.sh: wall time per phase, per fuzz target, per ctest label, and the skipped tests.

  hack/phase_report.py PHASES_TSV BUILD_DIR CTEST_TIMED_LOG [FUZZ_TIMES_TSV]

PHASES_TSV: lines "name<TAB>seconds<TAB>exit status[<TAB>start<TAB>end]" (epoch
seconds), written by test.sh's `phase`. The side checks (static checks, fuzz)
run beside ctest; the report says which of them held the side chain longest
and whether the side chain or ctest ended the run.
FUZZ_TIMES_TSV: lines "target<TAB>wall seconds<TAB>CPU seconds<TAB>inputs<TAB>result",
written by hack/fuzz.sh (FUZZ_TIMES).
With a mutation phase, its counts and survivors from build-mutation/results.json
(test/tools/mutation.py --json).
CTEST_TIMED_LOG: ctest's console output, each line prefixed with the epoch time
it arrived. A label's wall time is the span from the start of its first test to
the end of its last (labels run side by side under `ctest -j`, so the spans
overlap); "test time" is the sum of its tests' own times, as in ctest's
Label Time Summary.
"""

import json
import os
import re
import subprocess
import sys


def clock(seconds):
    seconds = int(round(seconds))
    return "%d:%02d" % (seconds // 60, seconds % 60)


SIDE_CHECKS = ("static checks", "fuzz")


def read_phases(path):
    """[(name, seconds, status, start or None, end or None)] in the order they ended."""
    phases = []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 3:
                continue
            start = float(fields[3]) if len(fields) > 4 else None
            end = float(fields[4]) if len(fields) > 4 else None
            phases.append((fields[0], float(fields[1]), fields[2], start, end))
    return phases


def phase_table(phases):
    print("%-16s %8s  %s" % ("phase", "wall", "result"))
    for name, seconds, status, _, _ in phases:
        print("%-16s %8s  %s" % (name, clock(seconds), "ok" if status == "0" else "FAILED (%s)" % status))


def side_check_summary(phases):
    """One line: how the side checks ran, which one was their long pole, and
    whether they or ctest ended the run."""
    side = {name: (seconds, start, end) for name, seconds, _, start, end in phases if name in SIDE_CHECKS}
    if not side:
        return
    print()
    if len(side) == 1:
        name, (seconds, _, _) = next(iter(side.items()))
        line = "side checks: only %s ran (%s)" % (name, clock(seconds))
    else:
        pole = max(side, key=lambda name: side[name][0])
        other = [name for name in side if name != pole][0]
        spans = [side[name] for name in side]
        overlapped = all(s[1] is not None for s in spans) and max(s[1] for s in spans) < min(s[2] for s in spans)
        how = "side by side" if overlapped else "one after the other"
        line = "side checks (%s): the long pole was %s, %s (%s %s)" % (
            how, pole, clock(side[pole][0]), other, clock(side[other][0]))
    ctest = [end for name, _, _, _, end in phases if name == "ctest" and end is not None]
    side_end = max((s[2] for s in side.values() if s[2] is not None), default=None)
    if ctest and side_end is not None:
        if side_end > ctest[0]:
            line += "; they ended %s after ctest and held the run" % clock(side_end - ctest[0])
        else:
            line += "; they ended %s before ctest" % clock(ctest[0] - side_end)
    print(line)


def fuzz_table(path):
    """Each fuzz target's wall time, longest first: which target holds the fuzz phase."""
    if not path or not os.path.exists(path):
        return
    rows = []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 5:
                rows.append((fields[0], float(fields[1]), float(fields[2]), fields[3], fields[4]))
    if not rows:
        return
    print()
    print("%-16s %8s %8s %10s  %s" % ("fuzz target", "wall", "CPU", "inputs", "result"))
    for target, wall, cpu, inputs, result in sorted(rows, key=lambda r: -r[1]):
        print("%-16s %8s %8s %10s  %s" % (target, clock(wall), clock(cpu), inputs, result))


def test_labels(build_dir):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True,
                         check=False).stdout
    labels = {}
    try:
        tests = json.loads(out).get("tests", [])
    except json.JSONDecodeError:
        return labels
    for test in tests:
        names = []
        for prop in test.get("properties", []):
            if prop.get("name") == "LABELS":
                names = prop.get("value", [])
        labels[test["name"]] = names or ["(no label)"]
    return labels


# Test names may hold spaces (value-parameterized gtest cases).
START = re.compile(r"^\s*Start\s+\d+: (.+?)\s*$")
END = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (.+?) \.+\s*(\**\s*\w[\w ]*?)\s+([\d.]+) sec")


def label_table(build_dir, timed_log):
    if not os.path.exists(timed_log):
        return
    labels = test_labels(build_dir)
    started, ended = {}, {}
    for line in open(timed_log, errors="replace"):
        stamp, _, text = line.rstrip("\n").partition(" ")
        try:
            at = float(stamp)
        except ValueError:
            continue
        m = START.match(text)
        if m:
            started.setdefault(m.group(1), at)
            continue
        m = END.match(text)
        if m:
            ended[m.group(1)] = (at, m.group(2).strip("* ").strip(), float(m.group(3)))
    spans = {}
    for name, (end_at, result, seconds) in ended.items():
        begin = started.get(name, end_at - seconds)
        for label in labels.get(name, ["(no label)"]):
            span = spans.setdefault(label, {"first": begin, "last": end_at, "sum": 0.0, "results": {}})
            span["first"] = min(span["first"], begin)
            span["last"] = max(span["last"], end_at)
            span["sum"] += seconds
            span["results"][result] = span["results"].get(result, 0) + 1
    if not spans:
        return
    print()
    print("%-16s %8s %10s  %s" % ("ctest label", "wall", "test time", "tests"))
    for label in sorted(spans, key=lambda k: spans[k]["first"]):
        s = spans[label]
        results = ", ".join("%d %s" % (n, r.lower()) for r, n in sorted(s["results"].items()))
        print("%-16s %8s %10s  %s" % (label, clock(s["last"] - s["first"]), clock(s["sum"]), results))


def skipped_tests(build_dir):
    """Skipped tests and the reason each printed (gtest's line after ': Skipped', else its last line).

    Read before anything runs `ctest -N` (test_labels): that rewrites LastTest.log."""
    log = os.path.join(build_dir, "Testing", "Temporary", "LastTest.log")
    if not os.path.exists(log):
        return None
    text = open(log, errors="replace").read()
    found = []
    # Blocks: '<n>/<m> Testing: <name>' ... 'Output:' ... '<end of output>' ... 'Test Skipped.'
    for m in re.finditer(r"\d+/\d+ Testing: (\S+)\n(.*?)(?=\n\d+/\d+ Testing: |\Z)", text, re.S):
        name, body = m.group(1), m.group(2)
        # ctest's words for a skip: SKIP_RETURN_CODE, SKIP_REGULAR_EXPRESSION, a
        # test that could not start.
        # A suite entry that exits with its SKIP_RETURN_CODE is logged as
        # "Test Passed." in LastTest.log; its main says so in its output
        # (test/support/suite_main.cc).
        if not any(mark in body for mark in ("Test Skipped", "Skip regular expression found",
                                             "Skip return code", "Test Not Run",
                                             "the entry counts as skipped")):
            continue
        output = body.split("<end of output>")[0]
        lines = [l.strip() for l in output.splitlines() if l.strip() and not l.startswith("---")]
        reason = ""
        for i, l in enumerate(lines):
            if l.endswith(": Skipped") and i + 1 < len(lines):
                reason = lines[i + 1]
                break
        if not reason:
            useful = [l for l in lines if not l.startswith("[") and not l.startswith("Output:")
                      and "start time:" not in l and not l.startswith(("Command:", "Directory:"))]
            reason = useful[-1] if useful else "(no reason printed)"
        found.append((name, reason[:200]))
    return found


def print_skipped(found):
    print()
    if not found:
        print("skipped tests: none")
        return
    print("skipped tests (%d):" % len(found))
    for name, reason in found:
        print("  %s: %s" % (name, reason))


def mutation_summary(phases, path):
    """One line from test/tools/mutation.py's --json, when this run had the phase."""
    if not any(name == "mutation" for name, *_ in phases) or not os.path.exists(path):
        return
    with open(path) as f:
        data = json.load(f)
    verdicts = [r["verdict"] for r in data["results"]]
    survivors = [r["id"] for r in data["results"] if r["verdict"] == "survived"]
    print()
    print("mutation: %d mutants in %s: %d killed, %d survived, %d timed out, %d not built; survivor rate %.0f%%" % (
        len(verdicts), clock(data["seconds"]), verdicts.count("killed"), verdicts.count("survived"),
        verdicts.count("timed out"), verdicts.count("not built"), 100 * data["survivor_rate"]))
    for ident in survivors:
        print("  survived: %s" % ident)


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    # Without this run's ctest output, LastTest.log would be an older run's.
    this_run = os.path.exists(sys.argv[3]) and os.path.getsize(sys.argv[3]) > 0
    skipped = skipped_tests(sys.argv[2]) if this_run else None
    phases = read_phases(sys.argv[1])
    phase_table(phases)
    side_check_summary(phases)
    fuzz_table(sys.argv[4] if len(sys.argv) > 4 else None)
    mutation_summary(phases, "build-mutation/results.json")
    label_table(sys.argv[2], sys.argv[3])
    if skipped is not None:
        print_skipped(skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
