#!/usr/bin/env bash
# Runs on the host after every other vm test (ctest DEPENDS on them all): no
# VM or what one needed outlived its test. vm_run.sh kills QEMU by pid and
# removes its job directory on every exit path, krbd_run.sh deletes its
# network namespace and its Ceph's directory; a leftover names the path that
# failed to clean up. (The dependency also puts the vm tests in the same
# scheduling level as the suite's fixture users, where their COST starts them
# first: see CMakeLists.txt.)
set -euo pipefail
left=()
for dir in /tmp/blockcsi-vm.* /tmp/blockcsi-krbd.*; do
  [ -e "$dir" ] && left+=("directory $dir")
done
while read -r pid args; do
  case "$args" in
  *qemu-system*blockcsi-vm.* | *vm_run.sh*) left+=("process $pid: ${args:0:160}") ;;
  esac
done < <(ps -eo pid=,args=)
if [ -d /run/netns ]; then
  for ns in /run/netns/blockcsi-krbd-*; do
    [ -e "$ns" ] && left+=("network namespace $(basename "$ns")")
  done
fi
if [ "${#left[@]}" -gt 0 ]; then
  printf 'left behind by the vm tests: %s\n' "${left[@]}" >&2
  exit 1
fi
echo "vm tests: no VM, job directory, Ceph directory or network namespace left"
