#!/usr/bin/env bash
# Runs one script as root inside a throw-away VM (QEMU, TCG, Debian's kernel; see
# hack/vm-kernel.sh and test/vm/guest_init.sh) and exits with its exit status.
#   test/vm/vm_run.sh [--keep DIR] SCRIPT [ARGS...]
# The VM sees the host's root read-only under a tmpfs overlay, so SCRIPT (an
# absolute path or one relative to the current directory) and the build tree run
# unchanged; the current directory and BLOCKCSI_* variables carry over. The
# script's output is printed after the VM stops (and kept in DIR/output with
# the console in DIR/console.log with --keep). Network: QEMU's user network
# with restrict=on (the VM reaches no address outside itself), or, with
# BLOCKCSI_VM_TAP=NAME and BLOCKCSI_VM_IP=ADDR/PREFIX, the tap device NAME as
# the guest's eth0 with that address: run this inside the network namespace
# that holds the tap (a runner made both; the guest reaches only that
# namespace, e.g. a throw-away Ceph listening there).
# Exit status: the script's, 77 (ctest's skip) with the reason when QEMU or
# the kernel cannot be had, 124 when the VM outlives BLOCKCSI_VM_TIMEOUT
# (default 600 s), 125 when the VM stopped without the script's status.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
keep=
if [ "${1:-}" = "--keep" ]; then
  keep=$2
  shift 2
fi
[ $# -ge 1 ] || {
  echo "usage: vm_run.sh [--keep DIR] SCRIPT [ARGS...]" >&2
  exit 2
}
script=$(realpath "$1")
shift

skip() {
  echo "vm_run: SKIP: $*" >&2
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root (9p passthrough of the host's root)"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 is not installed (Debian package qemu-system-x86)"
kernel_dir=$("$here/../../hack/vm-kernel.sh") || {
  code=$?
  [ "$code" -eq 77 ] && skip "no kernel for the VM (hack/vm-kernel.sh said why above)"
  exit "$code"
}
initrd=$(readlink -f "$kernel_dir/initrd.gz")
# The uncompressed kernel boots through its PVH entry, much faster under TCG.
kernel="$kernel_dir/vmlinuz"
[ -f "$kernel_dir/vmlinux" ] && kernel="$kernel_dir/vmlinux"

if [ -n "$keep" ]; then
  job=$(realpath -m "$keep")
  rm -rf "$job"
  mkdir -p "$job"
else
  job=$(mktemp -d /tmp/blockcsi-vm.XXXXXX)
fi
qemu_pid=
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  if [ -n "$qemu_pid" ]; then
    kill -KILL "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
  fi
  [ -n "$keep" ] || rm -rf "$job"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# /job/run: the script with this shell's directory and BLOCKCSI_* variables.
{
  echo "cd $(printf '%q' "$PWD") || exit 125"
  while IFS='=' read -r name _; do
    case "$name" in BLOCKCSI_*) echo "export $name=$(printf '%q' "${!name}")" ;; esac
  done < <(env)
  echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root"
  # The script runs chrooted from the initramfs: systemd's tools (udevadm
  # trigger, settle) would otherwise refuse to act.
  echo "export SYSTEMD_IGNORE_CHROOT=1"
  printf 'exec %q' "$script"
  for arg in "$@"; do printf ' %q' "$arg"; done
  echo
} >"$job/run"

net=(-netdev "user,id=n0,restrict=on")
guest_ip=10.0.2.15/24
if [ -n "${BLOCKCSI_VM_TAP:-}" ]; then
  [ -n "${BLOCKCSI_VM_IP:-}" ] || {
    echo "vm_run: BLOCKCSI_VM_TAP needs BLOCKCSI_VM_IP (the guest's ADDR/PREFIX)" >&2
    exit 2
  }
  net=(-netdev "tap,id=n0,ifname=$BLOCKCSI_VM_TAP,script=no,downscript=no")
  guest_ip=$BLOCKCSI_VM_IP
fi

timeout_s=${BLOCKCSI_VM_TIMEOUT:-600}
started=$(date +%s%N)
# QEMU dies with this script even when it is SIGKILLed (a ctest timeout).
setpriv --pdeathsig KILL qemu-system-x86_64 -machine q35,accel=tcg -cpu max -smp 1 -m "${BLOCKCSI_VM_MEMORY:-1536}" \
  -nodefaults -display none -no-reboot \
  -serial "file:$job/console.log" \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 quiet panic=-1 blockcsi.modules=$kernel_dir/lib/modules blockcsi.ip=$guest_ip" \
  -fsdev local,id=hostroot,path=/,security_model=passthrough,readonly=on \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev "local,id=job,path=$job,security_model=passthrough" \
  -device virtio-9p-pci,fsdev=job,mount_tag=job \
  "${net[@]}" -device virtio-net-pci,netdev=n0 \
  2>"$job/qemu.err" &
qemu_pid=$!

deadline=$((SECONDS + timeout_s))
boot_ms=
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ -z "$boot_ms" ] && [ -e "$job/booted" ]; then
    boot_ms=$((($(date +%s%N) - started) / 1000000))
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "vm_run: the VM ran longer than ${timeout_s} s; killed" >&2
    kill -KILL "$qemu_pid" 2>/dev/null || true
    wait "$qemu_pid" 2>/dev/null || true
    qemu_pid=
    cat "$job/output" 2>/dev/null || true
    tail -n 30 "$job/console.log" >&2 || true
    exit 124
  fi
  sleep 0.1
done
wait "$qemu_pid" || true
qemu_pid=
elapsed_ms=$((($(date +%s%N) - started) / 1000000))

cat "$job/output" 2>/dev/null || true
if [ ! -s "$job/status" ]; then
  echo "vm_run: the VM stopped without the script's exit status; console:" >&2
  tail -n 40 "$job/console.log" >&2 || true
  grep -v 'spans across multiple' "$job/qemu.err" >&2 || true
  exit 125
fi
status=$(cat "$job/status")
echo "vm_run: $(basename "$script") exited $status; boot to the script ${boot_ms:-?} ms, the VM ${elapsed_ms} ms in all (TCG: not a performance figure)" >&2
exit "$status"
