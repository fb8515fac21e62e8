#!/usr/bin/env python3
"""The suite's strength, measured (issue #22 item 6): break five promises,
one at a time, in a scratch clone, rebuild the unit tests that guard each,
and report whether they fail (KILLED) or stay green (SURVIVED); then check
the unmutated tree is green, so that a kill is the mutant's doing.

  git clone -b <branch> <repo> /tmp/mut && (cd /tmp/mut && BLOCKCSI_CONFIGURE_ONLY=1 hack/build.sh)
  test/tools/mutation_check.py /tmp/mut

Never run it on a working tree you care about: it edits sources in place
(and restores them). An anchor that no longer matches fails loudly: update
the mutant with the code it breaks."""
import subprocess, sys, os
if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0 if len(sys.argv) == 2 else 2)
root = sys.argv[1]
build = os.path.join(root, "build")
M = [
 ("skip the detach on a failed stage", "src/node/node_stage.cc",
  "  Status detached = options_.attacher->Detach(volume_id);\n  if (!detached.ok()) {\n    LogError(\"stage failed and undoing",
  "  Status detached = OkStatus();\n  if (!detached.ok()) {\n    LogError(\"stage failed and undoing",
  "node_unit_tests", "NodeServiceTest.*"),
 ("format a signed device", "src/node/node_stage.cc",
  "  } else if (probed->signatures.size() != 1 || probed->signatures.front().type != plan.fs_type) {",
  "  } else if (false) {",
  "node_unit_tests", "NodeServiceTest.*"),
 ("drop the serial check", "src/common/lun_identity.cc",
  "    if (actual.serial != expected_serial) ok = false;",
  "    (void)actual;",
  "attach_unit_tests", "*"),
 ("log a CHAP secret (at debug)", "src/controller/controller_internal.h",
  "  if (chap.username.empty()) return missing(secret_keys::kChapUsername);",
  "  LogDebug(\"chap from secrets\", {{\"volume\", volume_id}, {\"password\", chap.password}});\n  if (chap.username.empty()) return missing(secret_keys::kChapUsername);",
  "controller_unit_tests", "ControllerServiceTest.*"),
 ("skip the fsync of a record", "src/common/atomic_file.cc",
  "  if (st.ok()) st = FsyncFile(fd, temp, &options, \"temp-synced\");",
  "",
  "common_unit_tests", "AtomicFile*"),
]
for name, path, old, new, target, gfilter in M:
    p = os.path.join(root, path)
    src = open(p).read()
    assert src.count(old) == 1, (name, "anchor not found once")
    open(p, "w").write(src.replace(old, new))
    try:
        b = subprocess.run(["nice", "ninja", "-j2", target], cwd=build, capture_output=True, text=True)
        if b.returncode != 0:
            print(f"MUTANT {name}: BUILD FAILED\n{b.stdout[-2000:]}")
            continue
        t = subprocess.run([os.path.join(build, "tests", target), f"--gtest_filter={gfilter}", "--gtest_brief=1"],
                           cwd=build, capture_output=True, text=True)
        failed = [l for l in t.stdout.splitlines() if l.startswith("[  FAILED  ]") and "listed below" not in l]
        verdict = "KILLED (suite fails)" if t.returncode != 0 else "SURVIVED (suite green)"
        print(f"MUTANT {name} [{path}] -> {target} --gtest_filter={gfilter}: {verdict}")
        for l in sorted(set(failed))[:6]:
            print("    " + l)
    finally:
        open(p, "w").write(src)
# Build the unmutated tree again and check it is green, so a kill is the mutant's doing.
for target, gfilter in {(m[4], m[5]) for m in M}:
    subprocess.run(["nice", "ninja", "-j2", target], cwd=build, capture_output=True)
    t = subprocess.run([os.path.join(build, "tests", target), f"--gtest_filter={gfilter}", "--gtest_brief=1"],
                       cwd=build, capture_output=True, text=True)
    print(f"UNMUTATED {target} --gtest_filter={gfilter}: {'green' if t.returncode == 0 else 'RED'}")
