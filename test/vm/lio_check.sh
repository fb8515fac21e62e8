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
# Node records the kernel connector makes take this from iscsid.conf: a node
# whose target closed its session fails I/O after 10 s instead of the default
# two minutes (the revoke checks below wait for that).
sed -i 's/^node.session.timeo.replacement_timeout = .*/node.session.timeo.replacement_timeout = 10/' /etc/iscsi/iscsid.conf

mkdir -p "$work/pool" "$work/state"
start_agent() {
  "$bin/blockcsi-target" --pool "$work/pool" --target lio --portal "$portal" \
    --listen "127.0.0.1:$agent_port" --insecure --reconcile-interval 1h >>"$work/agent.log" 2>&1 &
  agent_pid=$!
  daemon_pids+=("$agent_pid")
  wait_for 60 grep -q "serving" "$work/agent.log" || die "blockcsi-target did not start"
}
step "start blockcsi-target --target lio and blockcsi --backend remote --connector kernel"
start_agent
mkdir -p "$work/staging" "$work/pods"
start_plugin --mode all --backend remote --target-agent "127.0.0.1:$agent_port" --insecure \
  --connector kernel --node-id "$node"

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

# compare_plain_configfs <name> <iqn>: the unit tests run LioExporter on a
# plain directory. The same exports there: a second blockcsi-target on a copy
# of the pool, --configfs-root a plain directory, writes them at its first
# reconcile (<iqn>'s is waited for). Every path it makes must be one of the
# same kind in the kernel's configfs, every value it wrote the value the
# kernel shows (in the kernel's format: configfs labels the unit serial,
# keeps no text of a link but where it points; control is write-only).
compare_plain_configfs() {
  local fake_cfs="$work/plain-configfs-$1" plain_pool="$work/plain-pool-$1" plain_agent_pid
  mkdir -p "$fake_cfs/target"
  cp -a --sparse=always "$work/pool" "$plain_pool"
  "$bin/blockcsi-target" --pool "$plain_pool" --target lio --configfs-root "$fake_cfs" --portal "$portal" \
    --listen "127.0.0.1:$((agent_port + 1))" --insecure --reconcile-interval 1h >"$work/plain-agent-$1.log" 2>&1 &
  plain_agent_pid=$!
  daemon_pids+=("$plain_agent_pid")
  wait_for 60 grep -qx 1 "$fake_cfs/target/iscsi/$2/tpgt_1/enable" || die "the plain-directory agent wrote no export"
  kill "$plain_agent_pid"
  wait "$plain_agent_pid" 2>/dev/null || true
  # The CHAP names and secrets are written without a newline (the kernel keeps
  # every byte written as the value) and shown with one.
  python3 "$here/compare_fake_sysfs.py" "$fake_cfs" /sys/kernel/config --links-by-target --write-only control \
    --shown "vpd_unit_serial=T10 VPD Unit Serial Number: {}" --shown "userid={}" --shown "password={}" \
    --shown "userid_mutual={}" --shown "password_mutual={}" "$plain_pool=$work/pool" ||
    die "the plain directory the unit tests use for configfs differs from the kernel's configfs ($1)"
}
step "the unit tests' stand-in for configfs against the kernel's, for this export"
compare_plain_configfs first "$iqn"

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

# ---- The same agent driven through the plugin's node side too: the kernel
# connector stages what LIO exports.
random_secret() { echo "$1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
CHAP_USER=vmnode-chap
CHAP_SECRET=$(random_secret chap)
CHAP_MUTUAL_USER=vmtarget-chap
CHAP_MUTUAL_SECRET=$(random_secret mutual)
WRONG_SECRET=$(random_secret wrong)
mutual=(--secret-env chap-username=CHAP_USER --secret-env chap-password=CHAP_SECRET
  --secret-env chap-mutual-username=CHAP_MUTUAL_USER --secret-env chap-mutual-password=CHAP_MUTUAL_SECRET)
wrong=(--secret-env chap-username=CHAP_USER --secret-env chap-password=WRONG_SECRET
  --secret-env chap-mutual-username=CHAP_MUTUAL_USER --secret-env chap-mutual-password=CHAP_MUTUAL_SECRET)
csi() {
  CHAP_USER=$CHAP_USER CHAP_SECRET=$CHAP_SECRET CHAP_MUTUAL_USER=$CHAP_MUTUAL_USER \
    CHAP_MUTUAL_SECRET=$CHAP_MUTUAL_SECRET WRONG_SECRET=$WRONG_SECRET \
    "$bin/csi-call" --endpoint "$csi_endpoint" "$@"
}
chap='{"chap":"true"}'

step "plugin: ext4 with mutual CHAP on LIO"
secret_args=("${mutual[@]}")
create_volume lio-fs ext4 67108864 "$chap"
fs_id=$volume_id
fs_iqn="iqn.2026-11.io.blockcsi:$fs_id"
controller_publish "$fs_id"
acl="$cfs/iscsi/$fs_iqn/tpgt_1/acls/$initiator"
expect "LIO wants CHAP on the target" grep -qx 1 "$cfs/iscsi/$fs_iqn/tpgt_1/attrib/authentication"
# configfs shows a value with one newline added: exactly the name, no more.
expect "the ACL carries the CHAP user" cmp -s <(printf '%s\n' "$CHAP_USER") "$acl/auth/userid"
expect "the ACL carries the mutual user" cmp -s <(printf '%s\n' "$CHAP_MUTUAL_USER") "$acl/auth/userid_mutual"
step "the unit tests' stand-in for configfs against the kernel's, with mutual CHAP (auth/*, attrib/authentication)"
compare_plain_configfs chap "$fs_iqn"
csi_fails PERMISSION_DENIED "${wrong[@]}" NodeStageVolume "$(stage_request "$fs_id")"
expect "the refused stage left no session" test -z "$(sessions_of "$fs_iqn")"
node_stage "$fs_id"
node_publish "$fs_id"
fs_target=$(target_of "$fs_id")
session=$(sessions_of "$fs_iqn")
expect "the session authenticated with CHAP" grep -qx "$CHAP_USER" "/sys/class/iscsi_session/$session/username"
expect "the session authenticated the target" grep -qx "$CHAP_MUTUAL_USER" "/sys/class/iscsi_session/$session/username_in"
head -c 1048576 /dev/urandom >"$work/fs-data"
{ cp "$work/fs-data" "$fs_target/data" && sync -f "$fs_target/data"; } || die "write on the LIO volume"

step "plugin: grow the mounted ext4 on LIO to 128 MiB"
dmesg -C
before=$(df -B1 --output=size "$fs_target" | tail -n 1)
capacity=$(grow "$fs_id" 134217728)
expect "the node reports the new size ($capacity)" test "$capacity" -ge 134217728
disk=$(disk_of "$(sessions_of "$fs_iqn")")
expect "the disk $disk grew" test "$(blockdev --getsize64 "/dev/$disk")" -ge 134217728
after=$(df -B1 --output=size "$fs_target" | tail -n 1)
expect "ext4 grew online ($before -> $after)" test "$after" -gt $((before + 48 * 1048576))
expect "no I/O or filesystem error while the LUN grew" sh -c "! dmesg | grep -E 'I/O error|EXT4-fs error|Buffer I/O'"
expect "the data survived the grow" cmp "$fs_target/data" "$work/fs-data"
expect "the session survived the grow" test "$(sessions_of "$fs_iqn")" = "$session"
{ head -c 65536 /dev/urandom >"$fs_target/after-grow" && sync -f "$fs_target/after-grow"; } || die "write after the grow"

step "plugin: snapshot, then a volume from it and a clone of the volume"
snapshot=$(csi CreateSnapshot "{\"source_volume_id\":\"$fs_id\",\"name\":\"lio-snap\"}") || die "CreateSnapshot"
snapshot_id=$(json_string "$snapshot" snapshot_id) || die "no snapshot_id in $snapshot"
# Written after the snapshot: the volume made from it must not have it.
{ echo later >"$fs_target/later" && sync -f "$fs_target/later"; } || die "write after the snapshot"
create_volume lio-restored ext4 134217728 "$chap" "{\"snapshot\":{\"snapshot_id\":\"$snapshot_id\"}}"
restored_id=$volume_id
create_volume lio-clone ext4 134217728 "$chap" "{\"volume\":{\"volume_id\":\"$fs_id\"}}"
clone_id=$volume_id
# check_copy <volume id> <has "later": yes|no>: staged, it holds the source's
# data at the source's grown size; then it goes.
check_copy() {
  local id=$1 t
  controller_publish "$id"
  node_stage "$id"
  node_publish "$id"
  t=$(target_of "$id")
  expect "$id has the source's data" cmp "$t/data" "$work/fs-data"
  expect "$id has the source's size" test "$(df -B1 --output=size "$t" | tail -n 1)" -ge "$after"
  if [ "$2" = yes ]; then
    expect "the clone $id was made after the snapshot" test -e "$t/later"
  else
    expect "the volume $id restored from the snapshot is the snapshot's moment" test ! -e "$t/later"
  fi
  node_unpublish "$id"
  node_unstage "$id"
  controller_unpublish "$id"
  delete_volume "$id"
}
check_copy "$restored_id" no
check_copy "$clone_id" yes
csi DeleteSnapshot "{\"snapshot_id\":\"$snapshot_id\"}" >/dev/null || die "DeleteSnapshot"
node_unpublish "$fs_id"
node_unstage "$fs_id"
controller_unpublish "$fs_id"
expect "the revoke removed the ACL and its CHAP" test ! -e "$acl"
delete_volume "$fs_id"
secret_args=()

step "plugin: a revoke ends the live session of a writing node"
create_volume lio-blk block 67108864
blk_id=$volume_id
blk_iqn="iqn.2026-11.io.blockcsi:$blk_id"
controller_publish "$blk_id"
node_stage "$blk_id"
node_publish "$blk_id"
python3 "$here/seq_writer.py" "$(target_of "$blk_id")" "$work/writer.log" &
writer_pid=$!
daemon_pids+=("$writer_pid")
wait_for 60 sh -c "grep -q '^ok 20$' '$work/writer.log'" || die "the writer did not get going: $(tail -n 2 "$work/writer.log")"
image="$work/pool/images/$blk_id.img"
controller_unpublish "$blk_id"
# From here on nothing the node sends may reach the image.
revoked_sum=$(sha256sum <"$image")
last_ok=$(grep '^ok ' "$work/writer.log" | tail -n 1 | cut -d' ' -f2)
wait_for 90 grep -q '^error ' "$work/writer.log" || die "the node's writes still succeed after the revoke: $(tail -n 1 "$work/writer.log")"
echo "the node's write failed after the revoke: $(grep '^error ' "$work/writer.log")"
wait "$writer_pid" 2>/dev/null || true
expect "no write landed after the revoke" test "$(sha256sum <"$image")" = "$revoked_sum"
# What the node saw written before the revoke is in the image.
expect "write $last_ok reached the image" test "$(dd if="$image" bs=4096 skip=$((last_ok % 16384)) count=1 status=none | head -c 32 | tr -d '\0')" = "seq $last_ok"
expect "the target has no session of the node" sh -c "! grep -rqs '$initiator' $cfs/iscsi/$blk_iqn/tpgt_1/dynamic_sessions"
step "plugin: the node unstages the revoked volume"
node_unpublish "$blk_id"
node_unstage "$blk_id"
expect "no session to the revoked target is left" test -z "$(sessions_of "$blk_iqn")"
expect "no sd disk is left" sh -c '! ls -d /sys/block/sd* 2>/dev/null'
delete_volume "$blk_id"
expect "no target left" test -z "$(ls -d "$cfs"/iscsi/iqn.* 2>/dev/null)"
expect "no backstore left" test -z "$(ls -d "$cfs"/core/*_[0-9]*/*/ 2>/dev/null)"
expect "no image left" test -z "$(ls "$work/pool/images")"
expect "no snapshot left" test -z "$(find "$work/pool" -name '*snap*' -type f)"
step "done"
