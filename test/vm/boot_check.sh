#!/bin/bash
# Runs inside the test VM (test/vm/vm_run.sh): the VM is what the other vm
# tests assume — Debian's kernel with the modules the kernel paths need, the
# host's root read-only under a writable overlay, and no network beyond itself.
set -u
failures=0
check() {
  local what=$1
  shift
  if "$@" >/dev/null 2>&1; then
    echo "ok:   $what"
  else
    echo "FAIL: $what"
    failures=$((failures + 1))
  fi
}

check "not the host's kernel (a Debian -amd64 build)" sh -c 'uname -r | grep -q -- "-amd64$"'
for module in iscsi_tcp sd_mod ext4 xfs btrfs loop dm_multipath dm_round_robin dm_service_time \
  target_core_mod target_core_file target_core_iblock iscsi_target_mod configfs rbd nbd dm_crypt; do
  check "modprobe $module" modprobe "$module"
done
check "configfs has LIO's core dir" sh -c 'mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config; test -d /sys/kernel/config/target/core'
check "/sys/class/iscsi_transport/tcp exists" test -d /sys/class/iscsi_transport/tcp
check "the build tree is visible" test -f "${BLOCKCSI_BUILD_DIR:-/nonexistent}/CMakeCache.txt"
check "the host's root is writable through the overlay" sh -c 'echo x >/usr/share/blockcsi-vm-probe && rm /usr/share/blockcsi-vm-probe'
check "the job share is writable" sh -c 'echo x >/job/probe && rm /job/probe'
check "loopback is up" sh -c 'ip -o addr show lo | grep -q 127.0.0.1'
check "iscsiadm and iscsid from the host" sh -c 'command -v iscsiadm && command -v iscsid'

echo "guest uptime at the end: $(cut -d' ' -f1 /proc/uptime) s"
[ "$failures" -eq 0 ]
