# shellcheck shell=bash
# Shared by the scripts the vm tests run inside the VM (source it; bash).
# BLOCKCSI_BUILD_DIR comes from ctest through test/vm/vm_run.sh.
set -euo pipefail
bin="${BLOCKCSI_BUILD_DIR:?BLOCKCSI_BUILD_DIR is not set}/bin"
work=$(mktemp -d /tmp/vmtest.XXXXXX)
daemon_pids=()

now_ms() { echo $(($(date +%s%N) / 1000000)); }
started_ms=$(now_ms)

# step <title>: prints where the script is, with the VM's elapsed time (TCG:
# never a performance figure).
step() { echo "== [$(($(now_ms) - started_ms)) ms] $*"; }

die() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do
    [ -f "$log" ] || continue
    echo "---- $log (last 30 lines)" >&2
    tail -n 30 "$log" >&2
  done
  exit 1
}

# expect <what> <command...>: the command must succeed.
expect() {
  local what=$1
  shift
  "$@" || die "$what"
}

wait_for() { # wait_for <seconds> <command...>
  local deadline=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# SIGTERM, then SIGKILL for what outlives it by 5 s (tgtd ignores SIGTERM).
stop_daemons() {
  local pid deadline=$((SECONDS + 5))
  for pid in "${daemon_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${daemon_pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  daemon_pids=()
}
# shellcheck disable=SC2154 # rc is assigned in the trap itself
trap 'rc=$?; stop_daemons; exit $rc' EXIT

# json_get <json> <python expression on d>: strings raw, anything else as JSON.
json_get() {
  python3 -c 'import json, sys
d = json.loads(sys.argv[1])
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))' "$1" "$2"
}

load_modules() {
  local module
  for module in "$@"; do
    modprobe "$module" || die "modprobe $module"
  done
}

mount_configfs() {
  load_modules configfs
  mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
}

# start_iscsid <initiator iqn>: open-iscsi's daemon with that initiator name.
start_iscsid() {
  load_modules iscsi_tcp sd_mod
  echo "InitiatorName=$1" >/etc/iscsi/initiatorname.iscsi
  # Its own session: iscsid's SIGTERM handler signals its whole process group.
  setsid iscsid -f >"$work/iscsid.log" 2>&1 &
  daemon_pids+=($!)
  # iscsiadm reaches iscsid on this abstract unix socket.
  wait_for 20 grep -q '@ISCSIADM_ABSTRACT_NAMESPACE' /proc/net/unix || die "iscsid did not start"
}

csi_endpoint="unix://$work/csi.sock"
csi() { "$bin/csi-call" --endpoint "$csi_endpoint" "$@"; }

# start_plugin <flags...>: blockcsi on $csi_endpoint, ready for calls.
start_plugin() {
  "$bin/blockcsi" --endpoint "$csi_endpoint" --state-dir "$work/state" "$@" >>"$work/plugin.log" 2>&1 &
  daemon_pids+=($!)
  wait_for 60 sh -c "'$bin/csi-call' --endpoint '$csi_endpoint' Probe | grep -q '\"ready\":true'" ||
    die "blockcsi did not become ready"
}

# iSCSI sessions the kernel has, by target name (sysfs, not iscsiadm).
sessions_of() {
  local s
  for s in /sys/class/iscsi_session/session*; do
    [ -e "$s/targetname" ] || continue
    [ "$(cat "$s/targetname")" = "$1" ] && basename "$s"
  done
  return 0
}

# disk_of <session>: the sd disk name behind an iSCSI session (sysfs).
disk_of() {
  local dev
  for dev in /sys/class/iscsi_session/"$1"/device/target*/*/block/*; do
    [ -e "$dev" ] && basename "$dev"
  done
  return 0
}
