#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (clang), every target in test/fuzz.
#   hack/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default 60 s, all targets
#   FUZZ_RUNS=N hack/fuzz.sh 0   a fixed number of inputs per target with a
#                                fixed seed: what CI runs, reproducible
#   FUZZ_JOBS=N                  targets run at once (default: one per core);
#                                each target's run is the same whatever N is
#   FUZZ_TIMES=FILE              appends "target<TAB>wall<TAB>cpu<TAB>inputs<TAB>result"
#                                per target (hack/phase_report.py shows it)
#   FUZZ_BUILD_ONLY=1            builds the targets, runs none (hack/test.sh builds
#                                the fuzz tree beside its gcc build this way)
# Prints each target's wall and CPU time (user+sys: the fairer figure on a
# shared machine). New inputs go to build-fuzz/corpus/<target>; a crash leaves
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
[ "${FUZZ_BUILD_ONLY:-0}" != "1" ] || exit 0

if [ -n "${FUZZ_RUNS:-}" ]; then
  limit=(-runs="$FUZZ_RUNS" -seed=1)
else
  limit=(-max_total_time="$seconds")
fi

# fuzz_one TARGET: one target's run; its summary line goes to
# $build_dir/fuzz-TARGET.result, "ok" or "crash" first.
fuzz_one() {
  local t="$1" corpus="$build_dir/corpus/$1" log="$build_dir/fuzz-$1.log" timing status=0 execs wall cpu
  mkdir -p "$corpus"
  cp -n "test/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
  timing="$(
    TIMEFORMAT='%R %U %S'
    { time "$build_dir/fuzz/fuzz_$t" "$corpus" "${limit[@]}" -print_final_stats=1 \
      -artifact_prefix="$build_dir/crash-$t-" >"$log" 2>&1; } 2>&1
  )" || status=$?
  read -r wall user sys <<<"${timing##*$'\n'}"
  cpu=$(awk "BEGIN { printf \"%.1f\", $user + $sys }")
  if [ "$status" -eq 0 ]; then
    execs=$(awk '/^stat::number_of_executed_units/ {print $2}' "$log")
    printf 'ok\nfuzz %s: %.0fs wall, %ss CPU, %s execs, no crash\n' "$t" "$wall" "$cpu" "${execs:-?}" \
      >"$build_dir/fuzz-$t.result"
  else
    printf 'crash\nfuzz %s: CRASH — see %s and %s/crash-%s-*\n' "$t" "$log" "$build_dir" "$t" \
      >"$build_dir/fuzz-$t.result"
  fi
  if [ -n "${FUZZ_TIMES:-}" ]; then
    printf '%s\t%s\t%s\t%s\t%s\n' "$t" "$wall" "$cpu" "${execs:-?}" "$([ "$status" -eq 0 ] && echo ok || echo CRASH)" \
      >>"$FUZZ_TIMES"
  fi
}

# Up to FUZZ_JOBS targets at once, started in name order; each prints when
# done, the summary below keeps the targets' order.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
running=0
for t in "${targets[@]}"; do
  rm -f "$build_dir/fuzz-$t.result"
  if [ "$running" -ge "$jobs_max" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait || true

status=0
for t in "${targets[@]}"; do
  result="$build_dir/fuzz-$t.result"
  if [ -f "$result" ] && [ "$(head -n 1 "$result")" = ok ]; then
    tail -n +2 "$result"
  else
    tail -n +2 "$result" >&2 2>/dev/null || echo "fuzz $t: did not finish" >&2
    status=1
  fi
done
exit "$status"
