#!/usr/bin/env bash
# Configures and builds into build/ (or $BUILD_DIR), using every core.
#   hack/build.sh [CMAKE_ARGS...]            everything (programs first, then tests)
#   BUILD_TARGETS="blockcsi csi-call" hack/build.sh   only those targets
#   BLOCKCSI_CONFIGURE_ONLY=1 hack/build.sh            configure, do not build
# Speed (issue #25): Ninja when installed; ccache when installed, with its cache
# outside the clone ($BLOCKCSI_CCACHE_DIR, default /var/cache/blockcsi/ccache for
# root) and base_dir at the clone, so every fresh clone on this machine shares one
# cache. BLOCKCSI_CCACHE=0 turns the cache off (to measure a cold build).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"

configure=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}")
# A tree configured before keeps its generator (cmake refuses to switch).
if [ ! -f "$build_dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  configure+=(-G Ninja)
fi
if [ "${BLOCKCSI_CCACHE:-1}" != "0" ] && command -v ccache >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    cache_dir="${BLOCKCSI_CCACHE_DIR:-/var/cache/blockcsi/ccache}"
  else
    cache_dir="${BLOCKCSI_CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/blockcsi-ccache}"
  fi
  mkdir -p "$cache_dir"
  # The settings travel in the launcher itself, so that `cmake --build` or
  # `ninja` run by hand later use the same cache as this script.
  launcher="env;CCACHE_DIR=$cache_dir;CCACHE_BASEDIR=$PWD;CCACHE_NOHASHDIR=1;CCACHE_MAXSIZE=${BLOCKCSI_CCACHE_SIZE:-20G};ccache"
  configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" -DCMAKE_C_COMPILER_LAUNCHER="$launcher")
else
  configure+=(-UCMAKE_CXX_COMPILER_LAUNCHER -UCMAKE_C_COMPILER_LAUNCHER)
fi
cmake -S . -B "$build_dir" "${configure[@]}" "$@" >/dev/null
if [ "${BLOCKCSI_CONFIGURE_ONLY:-0}" = "1" ]; then
  exit 0
fi
if [ -n "${BUILD_TARGETS:-}" ]; then
  read -r -a targets <<<"$BUILD_TARGETS"
  cmake --build "$build_dir" -j "$(nproc)" --target "${targets[@]}"
else
  # The programs first (a developer can try them while the tests build), then
  # everything else.
  cmake --build "$build_dir" -j "$(nproc)" --target blockcsi blockcsi-target blockctl csi-call
  cmake --build "$build_dir" -j "$(nproc)"
fi
