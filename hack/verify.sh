#!/usr/bin/env bash
# Style checks CI runs: clang-format on our C++, shellcheck on hack/ scripts,
# and clang-tidy on src/ (VERIFY_TIDY=0 skips it; it needs a built tree).
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
mapfile -t cxx_files < <(git ls-files --cached --others --exclude-standard -- 'src/*.cc' 'src/*.h' 'test/*.cc' 'test/*.h' | sort -u)
existing=()
for f in "${cxx_files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
if [ "${#existing[@]}" -gt 0 ]; then
  if ! clang-format --dry-run --Werror "${existing[@]}" 2>/tmp/blockcsi-format.log; then
    echo "verify: clang-format differences (run: clang-format -i <files>):" >&2
    grep -E "^[^ ].*: (error|warning)" /tmp/blockcsi-format.log | cut -d: -f1 | sort -u >&2 || true
    status=1
  fi
fi

# Layering: no #include in src/ goes up a layer (README.md, "Source map").
if ! hack/check_layers.py; then
  echo "verify: an include goes up a layer (hack/check_layers.py)" >&2
  status=1
fi

# Size: no file in src/ over 600 lines (split it by what it holds).
if ! hack/check_sizes.py; then
  echo "verify: a file in src/ has more than 600 lines (hack/check_sizes.py)" >&2
  status=1
fi

# One host seam (issue #16): no file, process or sleep call in src/ outside
# the seams' own implementation files.
if ! hack/check_host_seam.py; then
  echo "verify: a call goes around the host seam (hack/check_host_seam.py)" >&2
  status=1
fi

mapfile -t scripts < <(git ls-files --cached --others --exclude-standard -- 'hack/*.sh' '.ci/*' | sort -u)
existing=()
for f in "${scripts[@]}"; do [ -f "$f" ] && existing+=("$f"); done
if [ "${#existing[@]}" -gt 0 ] && ! shellcheck -x "${existing[@]}"; then
  echo "verify: shellcheck failed" >&2
  status=1
fi

# clang-tidy needs the compile database and the generated protobuf headers of
# a configured, built tree; hack/test.sh runs this script after its build.
build_dir="${BUILD_DIR:-build}"
if [ "${VERIFY_TIDY:-1}" = "1" ]; then
  if [ ! -f "$build_dir/compile_commands.json" ]; then
    echo "verify: clang-tidy skipped: no $build_dir/compile_commands.json (run hack/build.sh first)" >&2
  else
    tidy_log="$(mktemp)"
    # Same checks and files as run-clang-tidy over src/, with each TU's result
    # cached by the exact contents it sees (hack/clang_tidy_cached.py).
    if ! hack/clang_tidy_cached.py "$build_dir" "$PWD/src/" -j "$(nproc)" >"$tidy_log"; then
      echo "verify: clang-tidy findings:" >&2
      sed 's/\x1b\[[0-9;]*m//g' "$tidy_log" | grep -E "error:" | sort -u >&2
      status=1
    fi
    rm -f "$tidy_log"
  fi
fi
exit "$status"
