#!/usr/bin/env bash
# Host side of vm.csi_sanity: unpacks csi-sanity from ../shared/peers into
# the build tree (<build>/peers/csi-sanity, again when the packed file is
# newer; the same place the csi_sanity ctest uses), then runs
# test/vm/csi_sanity_check.sh in the VM, which sees the build tree. A clone
# without ../shared/peers skips (77) and says so.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${BLOCKCSI_BUILD_DIR:?BLOCKCSI_BUILD_DIR is not set}"
packed="${BLOCKCSI_SOURCE_DIR:-$here/../..}/../shared/peers/bin/csi-sanity.xz"
if [ ! -f "$packed" ]; then
  echo "vm.csi_sanity: SKIP: csi-sanity is not here: $packed is absent (a clone without ../shared/peers)" >&2
  exit 77
fi
binary="$build/peers/csi-sanity"
if [ ! -x "$binary" ] || [ "$packed" -nt "$binary" ]; then
  mkdir -p "$build/peers"
  xz --decompress --stdout "$packed" >"$binary.tmp.$$"
  chmod 755 "$binary.tmp.$$"
  mv "$binary.tmp.$$" "$binary"
fi
exec "$here/vm_run.sh" "$here/csi_sanity_check.sh"
