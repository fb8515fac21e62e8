#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (clang), every target in test/fuzz.
#   hack/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default 60 s, all targets
#   FUZZ_RUNS=N hack/fuzz.sh 0   a fixed number of inputs per target with a
#                                fixed seed: what CI runs, reproducible
# New inputs go to build-fuzz/corpus/<target>; a crash leaves
# build-fuzz/crash-<target>-* — copy it into test/fuzz/corpus/<target>/ so
# the ordinary test suite replays it forever after.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
build_dir=build-fuzz

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(find test/fuzz/corpus -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
# hack/build.sh: the same Ninja + shared ccache as the ordinary build.
BUILD_DIR="$build_dir" BUILD_TYPE=RelWithDebInfo BUILD_TARGETS="${build_targets[*]}" CC=clang CXX=clang++ \
  hack/build.sh -DBLOCKCSI_FUZZ=ON

status=0
for t in "${targets[@]}"; do
  corpus="$build_dir/corpus/$t"
  mkdir -p "$corpus"
  cp -n "test/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  log="$build_dir/fuzz-$t.log"
  if [ -n "${FUZZ_RUNS:-}" ]; then
    limit=(-runs="$FUZZ_RUNS" -seed=1)
  else
    limit=(-max_total_time="$seconds")
  fi
  started=$(date +%s)
  if "$build_dir/fuzz/fuzz_$t" "$corpus" "${limit[@]}" -print_final_stats=1 \
      -artifact_prefix="$build_dir/crash-$t-" >"$log" 2>&1; then
    execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}')
    echo "fuzz $t: $(($(date +%s) - started))s, ${execs:-?} execs, no crash"
  else
    echo "fuzz $t: CRASH — see $log and $build_dir/crash-$t-*" >&2
    status=1
  fi
done
exit "$status"
