#!/usr/bin/env python3
"""Mutation testing on a budget: does the suite notice when a promise breaks?

  test/tools/mutation.py [--budget SECONDS] [--seed TEXT] [--only REGEX] [--list]

Mutants are generated from src/ by rule (test/tools/mutants.py: system calls
and host-seam calls skipped or failing, crash-safe write steps dropped or
written in place, redaction dropped at log and error sites). Each is applied to
a scratch copy of the tree (build-mutation/tree, synced from this clone) and
built incrementally in build-mutation/tree/build (Ninja, and ccache shared with
build/, so the unmutated objects come from the cache). Its tests are the ctest
entries whose programs contain the mutated file: the test binary links its
object, or runs a program of ours (blockcsi, blockcsi-target, blockcsi-bridge,
blockctl) that does — a binary runs program P when one of its sources names
"/P" in a string, or depends on P in the build graph. They run cheapest first:
the tests built from <file>_test.cc, the unit tests beside it, the rest of the
unit tests, then the others (integration included), each group by its time in build/'s last ctest
run, stopping at the first failure.

  killed     a test failed (or hung past its ctest timeout)
  survived   every covering test ran and passed
  timed out  the covering tests that fit in the mutant's time
             (--mutant-seconds) passed; the others did not run
  not built  the mutant does not compile (not counted)

The survivor rate is survived / (killed + survived). The run fails when a
record-write or redaction mutant survives (unless test/tools/mutation_accepted.txt
names it, with a reason), or when the rate is above --max-survivor-rate.
When the budget cannot hold every mutant, the order is a shuffle seeded by
--seed (hack/test.sh passes the commit), the categories taken in turn, and
the run stops at the first mutant that no longer fits: the same commit
samples the same mutants. Never edits this clone's sources.
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutants as generator  # noqa: E402

PROGRAMS = ("blockcsi", "blockcsi-target", "blockcsi-bridge", "blockctl")
CATEGORIES = ("record-write", "redaction", "os-effect")
STRICT = ("record-write", "redaction")


def log(msg):
    print(msg, flush=True)


def sync_tree(root, tree):
    """Copies this clone's files (tracked and new, not ignored) into tree, links
    as links, rewriting only files whose contents changed so that Ninja rebuilds only those."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src, dst = os.path.join(root, rel), os.path.join(tree, rel)
        if os.path.islink(src):
            # Test data holds sysfs trees whose links must stay links.
            target = os.readlink(src)
            if not os.path.islink(dst) or os.readlink(dst) != target:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if os.path.lexists(dst):
                    os.remove(dst)
                os.symlink(target, dst)
            continue
        if not os.path.isfile(src):
            continue
        with open(src, "rb") as f:
            data = f.read()
        if os.path.exists(dst):
            with open(dst, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        shutil.copymode(src, dst)


def ninja(build, *args, check=True):
    r = subprocess.run(["ninja", "-C", build] + list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("ninja %s: %s" % (" ".join(args), r.stdout[-3000:] + r.stderr[-2000:]))
    return r


class Coverage:
    """Which ctest entries exercise which source file, read from the build graph."""

    def __init__(self, tree, build, exclude_labels):
        self.tree, self.build = tree, build
        listing = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                                            capture_output=True, text=True).stdout)
        self.tests = {}  # name -> (ninja target of its binary, labels)
        for t in listing["tests"]:
            cmd = t.get("command") or []
            props = {p["name"]: p["value"] for p in t.get("properties", [])}
            labels = props.get("LABELS", [])
            if not cmd or not cmd[0].startswith(build + "/") or set(labels) & exclude_labels:
                continue
            self.tests[t["name"]] = (os.path.relpath(cmd[0], build), labels)
        self._inputs = {}
        self._programs_run = {}
        self._header_objects = None

    def inputs(self, target):
        """Every file the target is built from (objects, sources, libraries), transitively."""
        if target not in self._inputs:
            out = ninja(self.build, "-t", "inputs", target).stdout.split()
            self._inputs[target] = {os.path.normpath(os.path.join(self.build, p)) for p in out}
        return self._inputs[target]

    def sources(self, target):
        return {p for p in self.inputs(target) if p.endswith((".cc", ".c", ".h"))}

    def programs_run(self, target):
        """Our programs the target runs, transitively (the bridge by the plugin, say)."""
        if target in self._programs_run:
            return self._programs_run[target]
        self._programs_run[target] = set()
        found = set()
        inputs = self.inputs(target)
        texts = []
        for src in self.sources(target):
            try:
                with open(src, errors="replace") as f:
                    texts.append(f.read())
            except OSError:
                pass
        blob = "\n".join(texts)
        for p in PROGRAMS:
            binary = os.path.join(self.build, "bin", p)
            if binary in inputs or ('/%s"' % p) in blob:
                found.add("bin/" + p)
        for p in list(found):
            found |= self.programs_run(p)
        found.discard(target)
        self._programs_run[target] = found
        return found

    def objects_including(self, header):
        if self._header_objects is None:
            self._header_objects = {}
            current = None
            for line in ninja(self.build, "-t", "deps").stdout.splitlines():
                if line and not line.startswith(" "):
                    current = os.path.normpath(os.path.join(self.build, line.split(":")[0]))
                elif line.strip() and current:
                    dep = os.path.normpath(os.path.join(self.build, line.strip()))
                    self._header_objects.setdefault(dep, set()).add(current)
        return self._header_objects.get(header, set())

    def covers(self, target, path):
        """Whether the program built by target contains the source (or header) path."""
        inputs = self.inputs(target)
        if path.endswith(".h"):
            return bool(self.objects_including(path) & inputs)
        return path in inputs

    def tests_for(self, rel):
        """[(test, its binary's target, the programs it needs)] that exercise tree/rel."""
        path = os.path.join(self.tree, rel)
        out = []
        for name, (target, labels) in sorted(self.tests.items()):
            runs = self.programs_run(target)
            if self.covers(target, path) or any(self.covers(p, path) for p in runs):
                out.append((name, target, labels, runs))
        return out


def load_costs(*builds):
    costs = {}
    for b in builds:
        try:
            with open(os.path.join(b, "Testing", "Temporary", "CTestCostData.txt")) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[0] not in costs:
                        costs[parts[0]] = float(parts[2])
        except OSError:
            pass
    return costs


def suite_files(coverage, target):
    """{gtest suite: the *_test.cc that defines it} among the target's sources."""
    key = ("suites", target)
    if key not in coverage._inputs:
        found = {}
        for src in sorted(coverage.sources(target)):
            if src.endswith("_test.cc"):
                with open(src, errors="replace") as f:
                    for suite in re.findall(r"\bTEST(?:_F|_P)?\(\s*(\w+)\s*,", f.read()):
                        found.setdefault(suite, src)
        coverage._inputs[key] = found
    return coverage._inputs[key]


def tier_of(coverage, test, rel):
    """0: a test of <file>_test.cc, 1: a test beside it (test/unit/<the file's
    folder below src/>), 2: another unit test, 3: the rest."""
    name, target, labels, _ = test
    suite = name.split(".")[0].split("/")[-1]
    where = suite_files(coverage, target).get(suite)
    if where:
        stem = os.path.splitext(os.path.basename(rel))[0] + "_test.cc"
        if os.path.basename(where) == stem:
            return 0
        folder = os.path.dirname(os.path.relpath(rel, "src"))
        if os.path.dirname(where).endswith(os.path.join("test", "unit", folder)):
            return 1
    return 2 if "unit" in labels else 3


def ordered_tests(coverage, tests, rel, costs):
    """[(test, its cost)], cheapest first within each tier."""

    def cost(test):
        return costs.get(test[0], 1.0 if "unit" in test[2] else 30.0)

    return [(t, cost(t)) for t in sorted(tests, key=lambda t: (tier_of(coverage, t, rel), cost(t), t[0]))]


def run_ctest(build, names, timeout, deadline):
    """[(failed test, how)] of ctest runs of exactly these tests, stopping at the first failure.
    The names go in chunks: CMake's regular expressions have a size limit."""
    chunks, current = [], []
    for n in names:
        if current and sum(len(c) + 1 for c in current) + len(n) > 3000:
            chunks.append(current)
            current = []
        current.append(n)
    chunks.append(current)
    for chunk in chunks:
        regex = "^(%s)$" % "|".join(re.escape(n) for n in chunk)
        stop = time.strftime("%H:%M:%S", time.localtime(deadline))
        r = subprocess.run(["nice", "ctest", "-R", regex, "-j", os.environ.get("MUTATION_CTEST_JOBS", "2"),
                            "--stop-on-failure", "--timeout", str(timeout), "--stop-time", stop,
                            "--output-on-failure"], cwd=build, capture_output=True, text=True)
        failed = re.findall(r"^\s*\d+ - (\S+) \((Failed|Timeout|SEGFAULT|Subprocess aborted|Child aborted|Exception)",
                            r.stdout, re.M)
        if "No tests were found" in r.stdout or "(Not Run)" in r.stdout:
            raise RuntimeError("ctest found no runnable test among %s" % ", ".join(chunk[:5]))
        if r.returncode != 0 and not failed:
            failed = [("(ctest exited %d)" % r.returncode, "Failed")]
        if failed:
            return failed, r.stdout
    return [], ""


def seeded_order(mutants, seed):
    """The categories in turn, each shuffled by the seed: a deterministic sample of any size."""
    queues = {}
    for m in mutants:
        key = hashlib.sha256((seed + "\0" + m.id).encode()).hexdigest()
        queues.setdefault(m.category, []).append((key, m))
    for q in queues.values():
        q.sort(key=lambda km: km[0])
    out = []
    while any(queues.values()):
        for c in CATEGORIES:
            if queues.get(c):
                out.append(queues[c].pop(0)[1])
    return out


def read_accepted(path):
    accepted = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    ident, _, reason = line.partition(" ")
                    accepted[ident] = reason.strip()
    return accepted


def run_mutant(m, coverage, args, costs, tree_build, deadline):
    """The mutant's verdict and what decided it."""
    rel = m.path
    tests = ordered_tests(coverage, coverage.tests_for(rel), rel, costs)
    if not tests:
        return "survived", "no ctest entry runs %s" % rel, []
    chosen, total = [], 0.0
    for t, cost in tests:
        if chosen and total + cost > args.mutant_seconds:
            break
        chosen.append(t)
        total += cost
    path = os.path.join(args.work, "tree", rel)
    with open(path) as f:
        original = f.read()
    if original[m.start:m.end] != m.original:
        return "not built", "the tree's %s differs from the clone's" % rel, []
    tiers = {}
    for t in chosen:
        tiers.setdefault(tier_of(coverage, t, rel), []).append(t)
    try:
        with open(path, "w") as f:
            f.write(m.apply(original))
        # Tier by tier: most mutants die in the first, before the other
        # binaries are even linked.
        for tier in sorted(tiers):
            targets = sorted({t[1] for t in tiers[tier]} | {p for t in tiers[tier] for p in t[3]})
            built = subprocess.run(["nice", "ninja", "-C", tree_build] + targets, capture_output=True, text=True)
            if built.returncode != 0:
                err = [line for line in built.stdout.splitlines() if "error" in line][:2]
                return "not built", "; ".join(err)[:300], []
            failed, _ = run_ctest(tree_build, [t[0] for t in tiers[tier]], args.test_timeout,
                                  min(deadline, time.time() + args.mutant_seconds * 2))
            if failed:
                how = "timed out" if any(kind == "Timeout" for _, kind in failed) else "failed"
                return "killed", "%s %s" % (failed[0][0], how), [n for n, _ in failed]
    finally:
        with open(path, "w") as f:
            f.write(original)
    if len(chosen) < len(tests):
        return "timed out", "%d of %d covering tests ran (the rest past --mutant-seconds)" % (
            len(chosen), len(tests)), []
    return "survived", "%d covering tests passed" % len(chosen), []


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    p.add_argument("--build", help="this clone's built tree: the test list, build graph and test times "
                   "(default ROOT/build)")
    p.add_argument("--work", help="the scratch tree and its build (default ROOT/build-mutation)")
    p.add_argument("--budget", type=float, default=float(os.environ.get("MUTATION_BUDGET_SECONDS", 600)))
    p.add_argument("--mutant-seconds", type=float, default=float(os.environ.get("MUTATION_MUTANT_SECONDS", 120)),
                   help="test time (from the last ctest run) one mutant may use")
    p.add_argument("--test-timeout", type=int, default=300, help="ctest --timeout for a mutant's tests")
    p.add_argument("--seed", help="sample seed (default: the commit)")
    p.add_argument("--only", help="only the mutants whose id matches this regex (all of them, no budget)")
    p.add_argument("--list", action="store_true", help="list the mutants and exit")
    p.add_argument("--max-survivor-rate", type=float,
                   default=float(os.environ.get("MUTATION_MAX_SURVIVOR_RATE", 0.5)))
    p.add_argument("--exclude-labels", default=os.environ.get("MUTATION_EXCLUDE_LABELS", "ceph,vm,k8s,deploy"))
    p.add_argument("--json", help="write every verdict here")
    args = p.parse_args()
    args.build = os.path.abspath(args.build or os.path.join(args.root, "build"))
    args.work = os.path.abspath(args.work or os.path.join(args.root, "build-mutation"))
    seed = args.seed or subprocess.run(["git", "rev-parse", "HEAD"], cwd=args.root, capture_output=True,
                                       text=True).stdout.strip()

    everything = generator.all_mutants(args.root)
    if args.list:
        for m in everything:
            print("%-12s %s\n             %s" % (m.category, m.id, m.describe()))
        counts = {c: sum(m.category == c for m in everything) for c in CATEGORIES}
        print("%d mutants: %s" % (len(everything), ", ".join("%s %d" % kv for kv in counts.items())))
        return 0
    order = [m for m in everything if re.search(args.only, m.id)] if args.only else seeded_order(everything, seed)

    start = time.time()
    deadline = start + args.budget if not args.only else float("inf")
    tree = os.path.join(args.work, "tree")
    tree_build = os.path.join(tree, "build")
    os.makedirs(tree, exist_ok=True)
    sync_tree(args.root, tree)
    if not os.path.exists(os.path.join(tree_build, "build.ninja")):
        subprocess.run(["hack/build.sh"], cwd=tree, check=True,
                       env=dict(os.environ, BUILD_DIR="build", BLOCKCSI_CONFIGURE_ONLY="1"))
    coverage = Coverage(args.root, args.build, set(filter(None, args.exclude_labels.split(","))))
    costs = load_costs(args.build, tree_build)
    log("mutation: %d mutants generated (seed %s), budget %ds, %d ctest entries mapped" % (
        len(everything), seed[:12], args.budget, len(coverage.tests)))

    results, build_estimate = [], 90.0
    for m in order:
        now = time.time()
        if now + build_estimate + min(args.mutant_seconds, 30) > deadline:
            break
        t0 = time.time()
        try:
            verdict, why, killers = run_mutant(m, coverage, args, costs, tree_build, deadline)
        except RuntimeError as e:
            verdict, why, killers = "not built", str(e)[:300], []
        took = time.time() - t0
        build_estimate = max(30.0, min(build_estimate, took))
        results.append({"id": m.id, "category": m.category, "where": m.describe(), "verdict": verdict,
                        "why": why, "killers": killers, "seconds": round(took, 1)})
        log("%-10s %-12s %s  (%s, %.0fs)" % (verdict.upper(), m.category, m.describe(), why, took))

    # A kill counts only if the killing test passes on the unmutated tree.
    killers = sorted({r["killers"][0] for r in results if r["verdict"] == "killed" and r["killers"]
                      and not r["killers"][0].startswith("(")})
    if killers:
        targets = sorted({coverage.tests[k][0] for k in killers if k in coverage.tests})
        ninja(tree_build, *targets, check=False)
        failed, out = run_ctest(tree_build, killers, args.test_timeout, time.time() + 600)
        broken = {n for n, _ in failed}
        for r in results:
            if r["verdict"] == "killed" and r["killers"] and r["killers"][0] in broken:
                r["verdict"], r["why"] = "not built", "its killer %s fails unmutated too" % r["killers"][0]
                log("BASELINE   %s fails on the unmutated tree: %s not counted" % (r["killers"][0], r["id"]))

    return report(results, order, everything, args, time.time() - start)


def report(results, order, everything, args, wall):
    accepted = read_accepted(os.path.join(os.path.dirname(os.path.abspath(__file__)), "mutation_accepted.txt"))
    count = {v: sum(r["verdict"] == v for r in results) for v in ("killed", "survived", "timed out", "not built")}
    decided = count["killed"] + count["survived"]
    rate = count["survived"] / decided if decided else 0.0
    log("")
    log("mutation: %d of %d mutants run in %d s (%d not reached within the budget)" % (
        len(results), len(everything), wall, len(order) - len(results)))
    for c in CATEGORIES:
        rs = [r for r in results if r["category"] == c]
        log("  %-12s %3d run: %d killed, %d survived, %d timed out, %d not built" % (
            c, len(rs), *[sum(r["verdict"] == v for r in rs) for v in ("killed", "survived", "timed out", "not built")]))
    log("killed %d, survived %d, timed out %d, not built %d; survivor rate %.0f%% (%d/%d)" % (
        count["killed"], count["survived"], count["timed out"], count["not built"], 100 * rate, count["survived"],
        decided))
    failing = []
    for r in results:
        if r["verdict"] != "survived":
            continue
        note = ""
        if r["id"] in accepted:
            note = "  [accepted: %s]" % accepted[r["id"]]
        elif r["category"] in STRICT:
            failing.append(r["id"])
        log("SURVIVOR %s\n         %s (%s)%s" % (r["id"], r["where"], r["why"], note))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "survivor_rate": rate, "seconds": round(wall)}, f, indent=1)
    status = 0
    if failing:
        log("mutation: FAILED: %d record-write or redaction mutant(s) survived (or name one in "
            "test/tools/mutation_accepted.txt with the reason no test can see it)" % len(failing))
        status = 1
    if rate > args.max_survivor_rate:
        log("mutation: FAILED: survivor rate %.0f%% above %.0f%%" % (100 * rate, 100 * args.max_survivor_rate))
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
