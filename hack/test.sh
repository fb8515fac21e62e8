#!/usr/bin/env bash
# The whole test suite: installs dependencies, checks style, builds, runs ctest.
# Run as root on Debian 12 (integration tests use tgtd, loop devices, FUSE and
# mounts; each test that needs root says so and is skipped without it).
#   hack/test.sh                 everything
#   hack/test.sh -L unit         only one label (unit, integration, deploy)
#   BLOCKCSI_SANITIZE=address hack/test.sh -L unit   sanitizer build in build-address/
set -euo pipefail
cd "$(dirname "$0")/.."

hack/install-deps.sh

sanitize="${BLOCKCSI_SANITIZE:-}"
if [ -n "$sanitize" ]; then
  export BUILD_DIR="build-$sanitize"
  hack/build.sh -DBLOCKCSI_SANITIZE="$sanitize"
else
  export BUILD_DIR="build"
  hack/build.sh
fi

# Style and static analysis (clang-tidy reads this build's compile database).
hack/verify.sh

# A short coverage-guided fuzz run of every parser, with a fixed seed and
# input count so that CI is reproducible (hack/fuzz.sh SECONDS for long
# runs); ordinary builds also replay each target's corpus as a ctest.
if [ -z "$sanitize" ] && [ "${BLOCKCSI_SKIP_FUZZ:-0}" != "1" ]; then
  FUZZ_RUNS="${FUZZ_RUNS:-100000}" hack/fuzz.sh 0
fi

cd "$BUILD_DIR"
ctest --output-on-failure --timeout 600 -j 2 "$@"
