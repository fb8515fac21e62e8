#!/bin/bash
# Runs inside the test VM: blockcsi-target --target lio on the kernel's own
# configfs, driven through the controller (blockcsi --backend remote) with
# csi-call, and a real open-iscsi initiator in the same VM.
#   create -> grant -> login sees the LUN with the published serial -> revoke
#   ends the session (I/O fails) -> grant again -> the target's configuration
#   wiped (a storage host reboot) -> the agent's start reconciles exactly the
#   recorded export and ACL back -> the data is still there -> delete leaves
#   nothing in configfs.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

node=vmnode
initiator="iqn.2026-11.io.blockcsi:node:$node"
portal=127.0.0.1:3260
agent_port=7000
cfs=/sys/kernel/config/target

step "modules and configfs"
load_modules target_core_mod target_core_file iscsi_target_mod
mount_configfs
# target/iscsi appears at the first mkdir of a fabric (the kernel loads its module then).
expect "LIO's configfs" test -d "$cfs/core"
start_iscsid "$initiator"

mkdir -p "$work/pool" "$work/state"
start_agent() {
  "$bin/blockcsi-target" --pool "$work/pool" --target lio --portal "$portal" \
    --listen "127.0.0.1:$agent_port" --insecure --reconcile-interval 1h >>"$work/agent.log" 2>&1 &
  agent_pid=$!
  daemon_pids+=("$agent_pid")
  wait_for 60 grep -q "serving" "$work/agent.log" || die "blockcsi-target did not start"
}
step "start blockcsi-target --target lio and the controller"
start_agent
start_plugin --mode controller --backend remote --target-agent "127.0.0.1:$agent_port" --insecure

capability='{"block":{},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}'
step "CreateVolume"
created=$(csi CreateVolume "{\"name\":\"lio-1\",\"capacity_range\":{\"required_bytes\":67108864},\"volume_capabilities\":[$capability]}") ||
  die "CreateVolume"
volume_id=$(json_get "$created" 'd["volume"]["volume_id"]')
iqn="iqn.2026-11.io.blockcsi:$volume_id"
core=$(readlink -f "$cfs/iscsi/$iqn/tpgt_1/lun/lun_1/$volume_id")
expect "the LUN links the backstore $core" test -d "$core"
expect "the backstore is enabled" grep -q 1 "$core/enable"
expect "no ACL before a grant" test -z "$(ls "$cfs/iscsi/$iqn/tpgt_1/acls")"
expect "the target listens on $portal" test -d "$cfs/iscsi/$iqn/tpgt_1/np/$portal"

publish() {
  local published
  published=$(csi ControllerPublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\",\"volume_capability\":$capability,\"readonly\":false}") ||
    die "ControllerPublishVolume"
  json_get "$published" 'd["publish_context"]'
}
step "ControllerPublishVolume (grant)"
context=$(publish)
serial=$(json_get "$context" 'd["serial"]')
expect "the ACL of $initiator" test -d "$cfs/iscsi/$iqn/tpgt_1/acls/$initiator/lun_1"

# login: the node record by hand (as the kernel connector makes it: manual
# start and scan), a short replacement timeout so a revoked session fails I/O
# within seconds instead of queueing it for two minutes.
login() {
  iscsiadm -m node -o new -T "$iqn" -p "$portal" >/dev/null || die "iscsiadm -m node -o new"
  iscsiadm -m node -T "$iqn" -p "$portal" -o update -n node.session.timeo.replacement_timeout -v 5 >/dev/null
  iscsiadm -m node -T "$iqn" -p "$portal" -l >"$work/login.out" 2>&1 || die "login: $(cat "$work/login.out")"
  session=$(sessions_of "$iqn")
  wait_for 20 sh -c "ls /sys/class/iscsi_session/$session/device/target*/*/block/* >/dev/null 2>&1" ||
    die "no disk appeared behind $session"
  disk=$(disk_of "$session")
  [ -n "$disk" ] || die "no disk behind $session"
  wait_for 10 test -b "/dev/$disk" || die "/dev/$disk did not appear"
  echo "logged in: $session -> /dev/$disk"
}
step "login from the VM's own initiator"
login
# VPD page 0x80: a 4-byte header, then the unit serial.
unit_serial=$(tail -c +5 "/sys/block/$disk/device/vpd_pg80" | tr -d '\0')
expect "the disk's unit serial ($unit_serial) is the published one ($serial)" test "$unit_serial" = "$serial"
size=$(blockdev --getsize64 "/dev/$disk")
expect "the disk is 64 MiB (is $size)" test "$size" -eq 67108864
head -c 1048576 /dev/urandom >"$work/data"
expect "write through the LUN" dd if="$work/data" of="/dev/$disk" bs=1M count=1 oflag=direct status=none
expect "read back through the LUN" cmp <(dd if="/dev/$disk" bs=1M count=1 iflag=direct status=none) "$work/data"
expect "the data is in the pool's image" cmp <(head -c 1048576 "$work/pool/images/$volume_id.img") "$work/data"

step "ControllerUnpublishVolume (revoke)"
csi ControllerUnpublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\"}" >/dev/null || die "ControllerUnpublishVolume"
expect "the ACL is gone" test ! -e "$cfs/iscsi/$iqn/tpgt_1/acls/$initiator"
expect "the target has no session for $initiator" sh -c "! grep -rqs '$initiator' $cfs/iscsi/$iqn/tpgt_1/dynamic_sessions"
if timeout 60 dd if="$work/data" of="/dev/$disk" bs=4k count=1 oflag=direct status=none 2>/dev/null; then
  die "a write after the revoke succeeded"
fi
echo "a write after the revoke failed, as it must"
iscsiadm -m node -T "$iqn" -p "$portal" -u >/dev/null 2>&1 || true
iscsiadm -m node -T "$iqn" -p "$portal" -o delete >/dev/null 2>&1 || true
expect "the initiator has no session left" test -z "$(sessions_of "$iqn")"
expect "the revoked write never reached the image" cmp <(head -c 1048576 "$work/pool/images/$volume_id.img") "$work/data"

step "grant again, then wipe LIO's configuration (a storage host reboot)"
publish >/dev/null
kill "$agent_pid"
wait "$agent_pid" 2>/dev/null || true
wipe_lio() {
  local t tpg acl mapped lun hba dev
  for t in "$cfs"/iscsi/iqn.*; do
    [ -d "$t" ] || continue
    for tpg in "$t"/tpgt_*; do
      echo 0 >"$tpg/enable"
      for acl in "$tpg"/acls/*/; do
        [ -d "$acl" ] || continue
        for mapped in "$acl"lun_*/; do
          find "$mapped" -maxdepth 1 -type l -delete
          rmdir "$mapped"
        done
        rmdir "$acl"
      done
      for lun in "$tpg"/lun/lun_*/; do
        find "$lun" -maxdepth 1 -type l -delete
        rmdir "$lun"
      done
      for np in "$tpg"/np/*/; do rmdir "$np"; done
      rmdir "$tpg"
    done
    rmdir "$t"
  done
  for hba in "$cfs"/core/*_[0-9]*/; do
    for dev in "$hba"*/; do rmdir "$dev"; done
    rmdir "$hba"
  done
}
wipe_lio || die "wiping LIO's configuration"
expect "no target left after the wipe" test -z "$(ls -d "$cfs"/iscsi/iqn.* 2>/dev/null)"

step "restart blockcsi-target: its first reconcile restores the export and the ACL"
start_agent
wait_for 60 test -d "$cfs/iscsi/$iqn/tpgt_1/acls/$initiator/lun_1" || die "the ACL was not restored"
expect "exactly one target" test "$(find "$cfs/iscsi" -mindepth 1 -maxdepth 1 -name 'iqn.*' | wc -l)" -eq 1
expect "exactly one ACL" test "$(find "$cfs/iscsi/$iqn/tpgt_1/acls" -mindepth 1 -maxdepth 1 | wc -l)" -eq 1
core=$(readlink -f "$cfs/iscsi/$iqn/tpgt_1/lun/lun_1/$volume_id")
expect "the backstore is the pool's image" grep -qx "$work/pool/images/$volume_id.img" "$core/udev_path"
expect "the backstore keeps its serial" grep -q "$serial" "$core/wwn/vpd_unit_serial"
expect "the tpg is enabled" grep -qx 1 "$cfs/iscsi/$iqn/tpgt_1/enable"
login
expect "the data survived the reboot" cmp <(dd if="/dev/$disk" bs=1M count=1 iflag=direct status=none) "$work/data"
iscsiadm -m node -T "$iqn" -p "$portal" -u >/dev/null || die "logout"
iscsiadm -m node -T "$iqn" -p "$portal" -o delete >/dev/null || true

step "ControllerUnpublishVolume and DeleteVolume"
csi ControllerUnpublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\"}" >/dev/null || die "ControllerUnpublishVolume"
csi DeleteVolume "{\"volume_id\":\"$volume_id\"}" >/dev/null || die "DeleteVolume"
expect "no target left" test -z "$(ls -d "$cfs"/iscsi/iqn.* 2>/dev/null)"
expect "no backstore left" test -z "$(ls -d "$cfs"/core/*_[0-9]*/*/ 2>/dev/null)"
expect "no image left" test ! -e "$work/pool/images/$volume_id.img"
step "done"
