#!/usr/bin/env bash
# Host side of vm.krbd: a network namespace of the test's own holding a tap
# device, the throw-away Ceph (hack/ceph-cluster.sh) listening on the
# namespace's address of that tap, and the VM joined to the tap (vm_run.sh
# with BLOCKCSI_VM_TAP), where test/vm/krbd_check.sh maps images with the
# VM's kernel RBD client. The VM reaches nothing but that namespace. Every
# daemon, the namespace and the directory go on every exit path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source_dir="${BLOCKCSI_SOURCE_DIR:-$here/../..}"

skip() {
  echo "vm.krbd: SKIP: $*" >&2
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces, Ceph daemons)"
[ -c /dev/net/tun ] || skip "no /dev/net/tun for the VM's tap device"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)"

# 10.213.0.0/24 exists only inside the namespace.
readonly ceph_addr=10.213.0.1 guest_ip=10.213.0.2/24 tap=blockcsi-tap0
ns="blockcsi-krbd-$$"
dir=$(mktemp -d /tmp/blockcsi-krbd.XXXXXX)
ns_made=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  "$source_dir/hack/ceph-cluster.sh" stop "$dir/ceph" >/dev/null 2>&1 || true
  [ -z "$ns_made" ] || ip netns delete "$ns" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_ns() { ip netns exec "$ns" "$@"; }
ip netns add "$ns"
ns_made=1
in_ns ip link set lo up
in_ns ip tuntap add dev "$tap" mode tap
in_ns ip addr add "$ceph_addr/24" dev "$tap"
in_ns ip link set "$tap" up

echo "vm.krbd: starting Ceph on $ceph_addr in network namespace $ns" >&2
if ! in_ns env CEPH_CLUSTER_ADDR="$ceph_addr" "$source_dir/hack/ceph-cluster.sh" start "$dir/ceph" \
  >"$dir/ceph.env" 2>"$dir/ceph-start.log"; then
  cat "$dir/ceph-start.log" >&2
  echo "vm.krbd: the throw-away Ceph did not start" >&2
  exit 1
fi
ceph_env() { sed -n "s/^$1=//p" "$dir/ceph.env"; }
BLOCKCSI_CEPH_CONF=$(ceph_env CEPH_CONF)
BLOCKCSI_CEPH_USER=$(ceph_env BLOCKCSI_CEPH_USER)
BLOCKCSI_CEPH_KEYRING=$(ceph_env BLOCKCSI_CEPH_KEYRING)
BLOCKCSI_RBD_POOL=$(ceph_env RBD_POOL)
export BLOCKCSI_CEPH_CONF BLOCKCSI_CEPH_USER BLOCKCSI_CEPH_KEYRING BLOCKCSI_RBD_POOL

set +e
in_ns env BLOCKCSI_VM_TAP="$tap" BLOCKCSI_VM_IP="$guest_ip" "$here/vm_run.sh" "$here/krbd_check.sh"
status=$?
set -e
# What the cluster saw of the fence, for a failure's reader.
if [ "$status" -ne 0 ]; then
  tail -n 20 "$dir/ceph/log/mon.a.log" >&2 || true
fi
exit "$status"
