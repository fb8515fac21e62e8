#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs ctest, and beside
# the tests the static checks and a short fuzz run. Run as root on Debian 12
# (integration tests use tgtd, loop devices, FUSE and mounts; each test that
# needs root says so and is skipped without it).
#   hack/test.sh                 everything
#   hack/test.sh -L unit         only one label. Suites: unit, integration,
#                                conformance, rbd, e2e, fault, fuzz, deploy; what a
#                                test needs: root, tgtd, ceph, netns (so -LE root
#                                runs what needs no privileges). docs/testing.md
#                                describes each label.
#   BLOCKCSI_SANITIZE=address hack/test.sh -L unit   sanitizer build in build-address/
#   BLOCKCSI_SKIP_FUZZ=1 / BLOCKCSI_SKIP_VERIFY=1    leave out those phases
# Ends with the wall time of every phase (and of every ctest label, from its
# first test's start to its last test's end) and the skipped tests' reasons.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

phases="$(mktemp)"
side_log="$(mktemp)"
reported=0
# A phase that fails stops the script: still say how long each phase took.
finish() {
  local status=$?
  if [ "$reported" = 0 ] && [ -s "$phases" ]; then
    echo "==== wall time per phase (stopped early)"
    python3 "$root/hack/phase_report.py" "$phases" "${BUILD_DIR:-build}" /dev/null || true
  fi
  rm -f "$phases" "$side_log"
  exit "$status"
}
trap finish EXIT
# phase NAME COMMAND...: runs it and records its wall time.
phase() {
  local name="$1" start=$EPOCHREALTIME status=0
  shift
  "$@" || status=$?
  printf '%s\t%s\t%s\n' "$name" "$(awk "BEGIN { print $EPOCHREALTIME - $start }")" "$status" >>"$phases"
  return "$status"
}

phase dependencies hack/install-deps.sh

sanitize="${BLOCKCSI_SANITIZE:-}"
if [ -n "$sanitize" ]; then
  export BUILD_DIR="build-$sanitize"
  build_args=(-DBLOCKCSI_SANITIZE="$sanitize")
else
  export BUILD_DIR="build"
  build_args=()
fi
phase configure env BLOCKCSI_CONFIGURE_ONLY=1 hack/build.sh "${build_args[@]}"
phase build hack/build.sh "${build_args[@]}"

# Beside the tests, at a lower priority so that the tests keep the CPU they
# need: the static checks (style, shellcheck, clang-tidy on src/; they read
# the sources and this build's compile database, nothing the tests write) and
# a short coverage-guided fuzz run of every parser in its own clang tree
# (build-fuzz/), with a fixed seed and input count so that CI is
# reproducible (hack/fuzz.sh SECONDS for long runs). Ordinary builds also
# replay each fuzz target's corpus as a ctest.
side_checks() {
  local status=0
  if [ "${BLOCKCSI_SKIP_VERIFY:-0}" != "1" ]; then
    phase "static checks" hack/verify.sh || status=1
  fi
  if [ -z "$sanitize" ] && [ "${BLOCKCSI_SKIP_FUZZ:-0}" != "1" ]; then
    phase fuzz env FUZZ_RUNS="${FUZZ_RUNS:-100000}" hack/fuzz.sh 0 || status=1
  fi
  return "$status"
}
(
  renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
  side_checks
) >"$side_log" 2>&1 &
side_pid=$!

ctest_status=0
ctest_log="$BUILD_DIR/ctest-timed.log"
# Each output line stamped with the time it arrived: the label spans below.
run_ctest() {
  (
    cd "$BUILD_DIR"
    ctest --output-on-failure --timeout 600 -j "${CTEST_JOBS:-2}" "$@"
  ) 2>&1 | while IFS= read -r line; do
    printf '%s\n' "$line"
    printf '%s %s\n' "$EPOCHREALTIME" "$line" >>"$ctest_log"
  done
}
rm -f "$ctest_log"
phase ctest run_ctest "$@" || ctest_status=1

side_status=0
wait "$side_pid" || side_status=$?
echo "==== static checks and fuzz (ran beside the tests)"
cat "$side_log"

echo "==== wall time per phase"
reported=1
python3 "$root/hack/phase_report.py" "$phases" "$BUILD_DIR" "$ctest_log" || true
if [ "$side_status" -ne 0 ]; then
  echo "test.sh: static checks or fuzz FAILED (see above)" >&2
fi
[ "$ctest_status" -eq 0 ] && [ "$side_status" -eq 0 ]
