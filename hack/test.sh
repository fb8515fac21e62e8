#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs ctest, and beside
# the tests the static checks and a short fuzz run. Run as root on Debian 12
# (integration tests use tgtd, loop devices, FUSE and mounts; each test that
# needs root says so and is skipped without it).
#   hack/test.sh                 everything
#   hack/test.sh -L unit         only one label. Suites: unit, integration,
#                                conformance, rbd, e2e, fault, fuzz, deploy, k8s; what a
#                                test needs: root, tgtd, ceph, netns (so -LE root
#                                runs what needs no privileges). docs/testing.md
#                                describes each label.
#   BLOCKCSI_SANITIZE=address hack/test.sh -L unit   sanitizer build in build-address/
#   BLOCKCSI_SKIP_FUZZ=1 / BLOCKCSI_SKIP_VERIFY=1 / BLOCKCSI_SKIP_MUTATION=1
#                                leave out those phases
#   MUTATION_BUDGET_SECONDS=600  the mutation phase's wall-time budget (a whole
#                                run only; docs/testing.md "Mutation testing")
#   BLOCKCSI_SIDE_BY_SIDE=0/1    static checks and fuzz one after the other /
#                                side by side (default: side by side with 2 or
#                                more cores)
# Ends with the wall time of every phase (and of every ctest label, from its
# first test's start to its last test's end) and the skipped tests' reasons.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

phases="$(mktemp)"
verify_log="$(mktemp)"
fuzz_log="$(mktemp)"
fuzz_times="$root/build-fuzz/fuzz-times.tsv"
reported=0
# A phase that fails stops the script: still say how long each phase took.
finish() {
  local status=$?
  # The fuzz tree's build beside the gcc build (below) ends on its own.
  if [ -n "${fuzz_build_pid:-}" ]; then wait "$fuzz_build_pid" 2>/dev/null || true; fi
  rm -f "${fuzz_build_log:-}"
  if [ "$reported" = 0 ] && [ -s "$phases" ]; then
    echo "==== wall time per phase (stopped early)"
    python3 "$root/hack/phase_report.py" "$phases" "${BUILD_DIR:-build}" /dev/null "$fuzz_times" || true
  fi
  rm -f "$phases" "$verify_log" "$fuzz_log"
  exit "$status"
}
trap finish EXIT
# phase NAME COMMAND...: runs it and records its wall time, its exit status
# and when it started and ended (phases may run side by side).
phase() {
  local name="$1" start=$EPOCHREALTIME status=0 end
  shift
  "$@" || status=$?
  end=$EPOCHREALTIME
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$(awk "BEGIN { print $end - $start }")" "$status" "$start" "$end" \
    >>"$phases"
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
# The clang fuzz tree (build-fuzz/) shares nothing with build/: with two or
# more cores it builds from now on, beside the gcc build at a lower priority,
# on the CPU that build leaves idle (protoc, links, its serial start), instead
# of only after it. The fuzz phase below waits for it, then only runs.
fuzz_build_log="$(mktemp)"
fuzz_build_pid=""
if [ -z "$sanitize" ] && [ "${BLOCKCSI_SKIP_FUZZ:-0}" != "1" ] && [ "$(nproc)" -ge 2 ] &&
  [ "${BLOCKCSI_SIDE_BY_SIDE:-1}" = "1" ]; then
  (
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
    phase "fuzz build" env FUZZ_BUILD_ONLY=1 hack/fuzz.sh
  ) >"$fuzz_build_log" 2>&1 &
  fuzz_build_pid=$!
fi
phase build hack/build.sh "${build_args[@]}"

# Beside the tests, at a lower priority so that the tests keep the CPU they
# need: the static checks (style, shellcheck, clang-tidy on src/; they read
# the sources and this build's compile database, nothing the tests write) and
# a short coverage-guided fuzz run of every parser in its own clang tree
# (build-fuzz/), with a fixed seed and input count so that CI is
# reproducible (hack/fuzz.sh SECONDS for long runs). Ordinary builds also
# replay each fuzz target's corpus as a ctest. The two share nothing (the
# static checks read build/, fuzz builds and writes build-fuzz/), so with two
# or more cores they run side by side, each on what the tests leave idle,
# instead of the second waiting for the first.
side_by_side="${BLOCKCSI_SIDE_BY_SIDE:-}"
if [ -z "$side_by_side" ]; then
  side_by_side=0
  [ "$(nproc)" -ge 2 ] && side_by_side=1
fi
run_verify() { [ "${BLOCKCSI_SKIP_VERIFY:-0}" != "1" ] || return 0; phase "static checks" hack/verify.sh; }
# The benchmark programs are not in `all` (the tests run none of them): they
# are compiled here, beside the tests, so one that stops compiling still fails.
run_bench_build() { phase "bench build" cmake --build "$BUILD_DIR" --target benches; }
run_fuzz() {
  if [ -z "$sanitize" ] && [ "${BLOCKCSI_SKIP_FUZZ:-0}" != "1" ]; then
    # The fuzz tree's build started beside the gcc build: a sibling, not a
    # child, so waited for by its pid. Should it have failed, fuzz.sh builds
    # again here and shows the error.
    while [ -n "$fuzz_build_pid" ] && kill -0 "$fuzz_build_pid" 2>/dev/null; do sleep 1; done
    cat "$fuzz_build_log"
    phase fuzz env FUZZ_RUNS="${FUZZ_RUNS:-100000}" FUZZ_TIMES="$fuzz_times" hack/fuzz.sh 0
  fi
}
side_checks() {
  local status=0 verify_pid
  if [ "$side_by_side" = 1 ]; then
    { run_verify && run_bench_build; } >"$verify_log" 2>&1 &
    verify_pid=$!
    run_fuzz >"$fuzz_log" 2>&1 || status=1
    wait "$verify_pid" || status=1
  else
    { run_verify && run_bench_build; } >"$verify_log" 2>&1 || status=1
    run_fuzz >"$fuzz_log" 2>&1 || status=1
  fi
  return "$status"
}
rm -f "$fuzz_times"
(
  renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
  side_checks
) &
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

# Mutation testing (test/tools/mutation.py, docs/testing.md "Mutation
# testing"): generated mutants of src/, each built in build-mutation/ and
# checked by the ctest entries whose programs contain the mutated file, on a
# budget, with a sample seeded by the commit. After ctest, not beside it: a
# mutant's integration tests start tgtd, loop devices, mounts and bridges,
# which the suite's own leak checks would count. Only on a whole run (it
# needs every test binary built and ctest's test times) whose tests passed.
mutation_status=0
if [ -z "$sanitize" ] && [ $# -eq 0 ] && [ "$ctest_status" -eq 0 ] && [ "${BLOCKCSI_SKIP_MUTATION:-0}" != "1" ]; then
  echo "==== mutation (budget ${MUTATION_BUDGET_SECONDS:-600} s)"
  phase mutation nice -n 10 python3 test/tools/mutation.py --build "$BUILD_DIR" \
    --budget "${MUTATION_BUDGET_SECONDS:-600}" --json build-mutation/results.json || mutation_status=1
fi

side_status=0
wait "$side_pid" || side_status=$?
echo "==== static checks (ran beside the tests)"
cat "$verify_log"
echo "==== fuzz (ran beside the tests)"
cat "$fuzz_log"

echo "==== wall time per phase"
reported=1
python3 "$root/hack/phase_report.py" "$phases" "$BUILD_DIR" "$ctest_log" "$fuzz_times" || true
if [ "$side_status" -ne 0 ]; then
  echo "test.sh: static checks or fuzz FAILED (see above)" >&2
fi
if [ "$mutation_status" -ne 0 ]; then
  echo "test.sh: mutation FAILED (survivors listed above)" >&2
fi
[ "$ctest_status" -eq 0 ] && [ "$side_status" -eq 0 ] && [ "$mutation_status" -eq 0 ]
