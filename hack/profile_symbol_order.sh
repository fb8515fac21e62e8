#!/usr/bin/env bash
# Regenerates src/cmd/blockcsi.symbol-order (issue #18): the functions the
# plugin runs once it serves, in memory_bench's rows (--mode all and node,
# with and without --metrics-address: idle, one lifecycle, a few volumes
# staged), profiled with callgrind. lld places their code side by side
# (src/cmd/lean_link.cmake), so a call touches fewer pages of the program.
# Start-up is left out: it runs once, and its code placed apart keeps the
# code that calls run dense. A stale list only places code less well; it
# never changes what the program does.
#   sudo hack/profile_symbol_order.sh [BUILD_DIR]    (needs valgrind, root, tgt, FUSE)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
command -v valgrind >/dev/null || { echo "profile_symbol_order: valgrind is not installed" >&2; exit 2; }
hostpath="$build/peers/hostpathplugin"
if [ ! -x "$hostpath" ]; then
  mkdir -p "$build/peers"
  xz -dc ../shared/peers/bin/hostpathplugin.xz >"$hostpath.tmp" && chmod +x "$hostpath.tmp" && mv "$hostpath.tmp" "$hostpath"
fi
work="$(mktemp -d /tmp/blockcsi-order.XXXXXX)"
watcher=""
cleanup() {
  if [ -n "$watcher" ]; then kill "$watcher" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin"
cp "$build/bin/blockcsi" "$work/bin/blockcsi.real"
cp "$build/bin/blockcsi-bridge" "$build/bin/libblockcsi_http.so" "$work/bin/"
cat >"$work/bin/blockcsi" <<WRAPPER
#!/bin/sh
exec valgrind --tool=callgrind --dump-instr=no --demangle=no --callgrind-out-file=$work/callgrind.%p $work/bin/blockcsi.real "\$@"
WRAPPER
chmod +x "$work/bin/blockcsi"

# Zero each profiled plugin's counts once its socket is up: what ran before
# is start-up. (Programs it forks inherit the counts and write their own
# files; they name the same functions.)
(
  zeroed=" "
  while true; do
    for pid in $(pgrep -f "$work/bin/blockcsi.real" || true); do
      case "$zeroed" in *" $pid "*) continue ;; esac
      sock="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | sed -n '/^--endpoint$/{n;s#^unix://##;p}')"
      if [ -n "$sock" ] && [ -S "$sock" ]; then
        callgrind_control -z "$pid" >/dev/null 2>&1 || true
        zeroed="$zeroed$pid "
      fi
    done
    sleep 0.2
  done
) &
watcher=$!

"$build/bench/memory_bench" --hostpath "$hostpath" --staged 2 --binary profile="$work/bin/blockcsi" \
  --modes all,node,all+metrics >"$work/bench.log" 2>&1 || { cat "$work/bench.log" >&2; exit 1; }
hack/callgrind_symbol_order.py blockcsi.real "$work"/callgrind.* >"$work/order"
echo "profile_symbol_order: $(wc -l <"$work/order") functions -> src/cmd/blockcsi.symbol-order"
mv "$work/order" src/cmd/blockcsi.symbol-order
