#!/usr/bin/env bash
# Style checks CI runs: clang-format on our C++, shellcheck on hack/ scripts,
# and clang-tidy when VERIFY_TIDY=1 (it needs a configured build and is slow).
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

mapfile -t scripts < <(git ls-files --cached --others --exclude-standard -- 'hack/*.sh' '.ci/*' | sort -u)
existing=()
for f in "${scripts[@]}"; do [ -f "$f" ] && existing+=("$f"); done
if [ "${#existing[@]}" -gt 0 ] && ! shellcheck -x "${existing[@]}"; then
  echo "verify: shellcheck failed" >&2
  status=1
fi

if [ "${VERIFY_TIDY:-0}" = "1" ]; then
  if [ ! -f build/compile_commands.json ]; then
    echo "verify: clang-tidy needs a configured build/ (run hack/build.sh)" >&2
    status=1
  else
    mapfile -t sources < <(git ls-files -- 'src/*.cc')
    if ! clang-tidy -p build --quiet "${sources[@]}" 2>/dev/null; then
      echo "verify: clang-tidy findings" >&2
      status=1
    fi
  fi
fi
exit "$status"
