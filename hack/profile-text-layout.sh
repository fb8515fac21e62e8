#!/usr/bin/env bash
# hack/profile-text-layout.sh: regenerates hack/profiles/hot_text.symbols, the
# functions the plugin executes, which the build gathers at the start of its
# text (src/cmd/lean_link.cmake item 5 says why; the link fails once the list
# matches too little of the code).
#   1. links blockcsi without the current layout (valgrind names no function
#      outside the .text section, so a profile of a laid-out binary would
#      miss the very code the layout moved);
#   2. runs hack/demo.sh, one volume's whole lifecycle, with the plugin
#      under callgrind, which records every function it executes;
#   3. hack/hot_text_script.py writes their names, sorted, one a line.
# Run it after changes that move much code (new files, a new gRPC). Root,
# Debian 12; installs valgrind.
#   hack/profile-text-layout.sh      (BUILD_DIR=... for another build tree)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="$(realpath -m "${BUILD_DIR:-build}")"

if ! command -v valgrind >/dev/null 2>&1; then
  apt-get install -y --no-install-recommends valgrind >/dev/null
fi
BLOCKCSI_CONFIGURE_ONLY=1 BUILD_DIR="$build_dir" hack/build.sh -DBLOCKCSI_HOT_TEXT=OFF
restore_options() {
  cmake -S . -B "$build_dir" -DBLOCKCSI_HOT_TEXT=ON >/dev/null
  rm -rf "$profile_dir"
}
profile_dir="$(mktemp -d /tmp/blockcsi-text-layout.XXXXXX)"
trap restore_options EXIT
cmake --build "$build_dir" --target blockcsi csi-call

SKIP_BUILD=1 BIN_DIR="$build_dir/bin" \
  PLUGIN_WRAPPER="valgrind --tool=callgrind --demangle=no --callgrind-out-file=$profile_dir/callgrind.%p" \
  hack/demo.sh >"$profile_dir/demo.log" 2>&1 || { cat "$profile_dir/demo.log" >&2; exit 1; }
# One file per process: the plugin's, and those of children it forked that
# ran its code before their exec. The profile takes what any of them ran.
python3 hack/hot_text_script.py profile --binary "$build_dir/bin/blockcsi" --out hack/profiles/hot_text.symbols \
  "$profile_dir"/callgrind.*
echo "profile-text-layout: hack/profiles/hot_text.symbols written; the next build links blockcsi with it"
