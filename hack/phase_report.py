#!/usr/bin/env python3
"""The end of hack/test.sh: wall time per phase, per ctest label, and the skipped tests.

  hack/phase_report.py PHASES_TSV BUILD_DIR CTEST_TIMED_LOG

PHASES_TSV: lines "name<TAB>seconds<TAB>exit status", written by test.sh's `phase`.
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


def phase_table(path):
    print("%-16s %8s  %s" % ("phase", "wall", "result"))
    with open(path) as f:
        for line in f:
            name, seconds, status = line.rstrip("\n").split("\t")
            print("%-16s %8s  %s" % (name, clock(float(seconds)), "ok" if status == "0" else "FAILED (%s)" % status))


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
        if not any(mark in body for mark in ("Test Skipped", "Skip regular expression found",
                                             "Skip return code", "Test Not Run")):
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


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    # Without this run's ctest output, LastTest.log would be an older run's.
    this_run = os.path.exists(sys.argv[3]) and os.path.getsize(sys.argv[3]) > 0
    skipped = skipped_tests(sys.argv[2]) if this_run else None
    phase_table(sys.argv[1])
    label_table(sys.argv[2], sys.argv[3])
    if skipped is not None:
        print_skipped(skipped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
