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

# Limits on waits and calls are ceilings for a 1-CPU TCG guest on a loaded
# 2-core CI machine, where one step can take minutes: a wait ends as soon as
# its condition holds, so a generous ceiling costs nothing when all is well.
# The whole VM is bounded by ctest's timeout (vm_run.sh stops it before).
readonly vm_patience_s=300

wait_for() { # wait_for <seconds> <command...>
  local deadline=$(($(date +%s) + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}

# SIGTERM, then SIGKILL for what outlives it by 5 s. tgtd ignores SIGTERM, so
# it is killed outright: waiting for it cost every check 5 s at its end.
stop_daemons() {
  local pid deadline=$((SECONDS + 5))
  for pid in "${daemon_pids[@]}"; do
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = tgtd ]; then
      kill -KILL "$pid" 2>/dev/null || true
    else
      kill "$pid" 2>/dev/null || true
    fi
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
  wait_for "$vm_patience_s" grep -q '@ISCSIADM_ABSTRACT_NAMESPACE' /proc/net/unix || die "iscsid did not start"
}

csi_endpoint="unix://$work/csi.sock"
# csi-call's own deadline (60 s) is shorter than a NodeStageVolume (login,
# mkfs) can take here; the kubelet would retry, a test must wait for the
# answer instead. The plugin's own timeouts bound the work.
csi_call=("$bin/csi-call" --endpoint "$csi_endpoint" --timeout 600)
csi() { "${csi_call[@]}" "$@"; }

# start_plugin <flags...>: blockcsi on $csi_endpoint, ready for calls.
# Sets $plugin_pid.
start_plugin() {
  "$bin/blockcsi" --endpoint "$csi_endpoint" --state-dir "$work/state" "$@" >>"$work/plugin.log" 2>&1 &
  plugin_pid=$!
  daemon_pids+=("$plugin_pid")
  wait_for "$vm_patience_s" sh -c "'$bin/csi-call' --endpoint '$csi_endpoint' Probe | grep -q '\"ready\":true'" ||
    die "blockcsi did not become ready"
}

# start_tgtd <control port> <portal>...: a tgtd listening on the portals.
start_tgtd() {
  local port=$1 extra
  tgtd -f -C "$port" --iscsi "portal=$2" >"$work/tgtd.log" 2>&1 &
  daemon_pids+=($!)
  wait_for "$vm_patience_s" tgtadm -C "$port" --lld iscsi --op show --mode target || die "tgtd did not start"
  shift 2
  for extra in "$@"; do
    tgtadm -C "$port" --lld iscsi --op new --mode portal --param "portal=$extra" || die "tgtd portal $extra"
  done
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

# Field access without a Python start per call (dear under TCG): csi-call
# prints compact JSON, its string values carry no quote or brace here.
# json_string <json> <key>: the first "key":"value" string.
json_string() {
  [[ $1 =~ \"$2\":\"([^\"]*)\" ]] || return 1
  printf '%s\n' "${BASH_REMATCH[1]}"
}
# json_object <json> <key>: the first "key":{...} object of strings, or {}.
json_object() {
  if [[ $1 =~ \"$2\":(\{[^{}]*\}) ]]; then
    printf '%s\n' "${BASH_REMATCH[1]}"
  else
    echo '{}'
  fi
}

# csi_fails <CODE> <csi-call args...> <method> <request>: the call must fail
# with that gRPC code; its message is left in $work/call.err.
csi_fails() {
  local code=$1
  shift
  local method=${*: -2:1}
  if csi "$@" >"$work/call.out" 2>"$work/call.err"; then
    die "$method succeeded; expected $code"
  fi
  grep -q ": $code: " "$work/call.err" || die "$method failed otherwise than $code: $(cat "$work/call.err")"
}

# ext4 is mounted without the background inode-table zeroing (ext4lazyinit):
# tgtd and LIO's fileio backstore cannot resize a LUN in place, so an online
# grow re-creates it, and a command that reaches the target in that instant
# fails (LOGICAL UNIT NOT SUPPORTED; docs/deploy.md, "Online expansion").
# The grow checks assert that an idle filesystem grows without one I/O
# error; lazyinit would be a writer the test does not control.
capability_json() { # <ext4|xfs|btrfs|block>
  if [ "$1" = block ]; then
    echo '{"block":{},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}'
  elif [ "$1" = ext4 ]; then
    echo '{"mount":{"fs_type":"ext4","mount_flags":["noinit_itable"]},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}'
  else
    echo "{\"mount\":{\"fs_type\":\"$1\"},\"access_mode\":{\"mode\":\"SINGLE_NODE_WRITER\"}}"
  fi
}

# What the helpers below know of each volume, by id.
declare -A vol_fs vol_context vol_publish
# Secrets for the calls that take them (csi-call --secret-env flags); the
# variables they name are set on the csi-call command only, never exported.
secret_args=()

# create_volume <name> <fs|block> <bytes> [parameters json] [content source json]:
# sets $volume_id.
create_volume() {
  local name=$1 fs=$2 bytes=$3 parameters=${4:-'{}'} source=${5:-} created extra=
  [ -z "$source" ] || extra=",\"volume_content_source\":$source"
  created=$(csi CreateVolume "{\"name\":\"$name\",\"capacity_range\":{\"required_bytes\":$bytes},\"volume_capabilities\":[$(capability_json "$fs")],\"parameters\":$parameters$extra}") ||
    die "CreateVolume $name"
  volume_id=$(json_string "$created" volume_id) || die "CreateVolume $name: no volume_id in $created"
  vol_fs[$volume_id]=$fs
  vol_context[$volume_id]=$(json_object "$created" volume_context)
}

controller_publish() { # <volume id> [node id]
  local published
  published=$(csi "${secret_args[@]}" ControllerPublishVolume "{\"volume_id\":\"$1\",\"node_id\":\"${2:-$node}\",\"volume_capability\":$(capability_json "${vol_fs[$1]}"),\"readonly\":false}") ||
    die "ControllerPublishVolume $1"
  vol_publish[$1]=$(json_object "$published" publish_context)
}
controller_unpublish() { # <volume id> [node id]
  csi ControllerUnpublishVolume "{\"volume_id\":\"$1\",\"node_id\":\"${2:-$node}\"}" >/dev/null ||
    die "ControllerUnpublishVolume $1"
}
staging_of() { echo "$work/staging/$1"; }
target_of() { echo "$work/pods/$1"; }
stage_request() { # <volume id> [publish context]: the NodeStageVolume request
  echo "{\"volume_id\":\"$1\",\"publish_context\":${2:-${vol_publish[$1]}},\"staging_target_path\":\"$(staging_of "$1")\",\"volume_capability\":$(capability_json "${vol_fs[$1]}"),\"volume_context\":${vol_context[$1]}}"
}
node_stage() { csi "${secret_args[@]}" NodeStageVolume "$(stage_request "$1")" >/dev/null || die "NodeStageVolume $1"; }
node_publish() {
  csi NodePublishVolume "{\"volume_id\":\"$1\",\"publish_context\":${vol_publish[$1]},\"staging_target_path\":\"$(staging_of "$1")\",\"target_path\":\"$(target_of "$1")\",\"volume_capability\":$(capability_json "${vol_fs[$1]}"),\"readonly\":false}" >/dev/null ||
    die "NodePublishVolume $1"
}
node_unpublish() {
  csi NodeUnpublishVolume "{\"volume_id\":\"$1\",\"target_path\":\"$(target_of "$1")\"}" >/dev/null || die "NodeUnpublishVolume $1"
}
node_unstage() {
  csi NodeUnstageVolume "{\"volume_id\":\"$1\",\"staging_target_path\":\"$(staging_of "$1")\"}" >/dev/null || die "NodeUnstageVolume $1"
}
delete_volume() { csi DeleteVolume "{\"volume_id\":\"$1\"}" >/dev/null || die "DeleteVolume $1"; }

# grow <volume id> <bytes>: ControllerExpandVolume, then NodeExpandVolume on
# the published path (online); prints the capacity the node reports.
grow() {
  local answer
  answer=$(csi ControllerExpandVolume "{\"volume_id\":\"$1\",\"capacity_range\":{\"required_bytes\":$2},\"volume_capability\":$(capability_json "${vol_fs[$1]}")}") ||
    die "ControllerExpandVolume $1"
  [[ $answer == *'"node_expansion_required":true'* ]] || die "ControllerExpandVolume $1 asks for no node expansion: $answer"
  answer=$(csi NodeExpandVolume "{\"volume_id\":\"$1\",\"volume_path\":\"$(target_of "$1")\",\"staging_target_path\":\"$(staging_of "$1")\",\"capacity_range\":{\"required_bytes\":$2},\"volume_capability\":$(capability_json "${vol_fs[$1]}")}") ||
    die "NodeExpandVolume $1"
  [[ $answer =~ \"capacity_bytes\":\"?([0-9]+) ]] || die "NodeExpandVolume $1 reports no capacity: $answer"
  echo "${BASH_REMATCH[1]}"
}

# devnum_of <path>: "major:minor" of the device node at path, or of the
# device mounted there (its source: btrfs reports an anonymous st_dev).
devnum_of() {
  local node=$1 hex
  [ -b "$node" ] || node=$(findmnt -n -o SOURCE --mountpoint "$1")
  hex=$(stat -L -c '%t:%T' "$node") || return 1
  printf '%d:%d\n' "0x${hex%:*}" "0x${hex#*:}"
}

# attach_records: the attach records in the plugin's state dir.
attach_records() { find "$work/state" -path '*/attachments/*' -name '*.json' 2>/dev/null; }
