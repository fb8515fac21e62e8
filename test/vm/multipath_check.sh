#!/bin/bash
# Runs inside the test VM: `blockcsi --connector kernel` with two portals of
# one tgtd target (127.0.0.1 and 127.0.0.2, both the guest's loopback),
# systemd-udevd and multipathd running: the stage logs in through both, mounts
# the dm-multipath device holding both paths, the data survives an
# unstage/restage, and the unstage flushes the map and logs out of both.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

node=vmnode
control_port=4244
load_modules dm_multipath dm_round_robin dm_service_time
start_iscsid "iqn.2000-01.invalid:not-the-node"

step "udevd and multipathd"
/lib/systemd/systemd-udevd --daemon >"$work/udevd.log" 2>&1 || die "systemd-udevd"
udevadm trigger >/dev/null 2>&1 || true
udevadm settle --timeout 30 || true
cat >/etc/multipath.conf <<'EOF'
defaults {
  find_multipaths no
  user_friendly_names yes
}
EOF
multipathd -d -s >"$work/multipathd.log" 2>&1 &
daemon_pids+=($!)
wait_for 30 multipathd show daemon || die "multipathd did not start"

step "tgtd on two portals and blockcsi --connector kernel"
tgtd -f -C "$control_port" --iscsi portal=127.0.0.1:3260 >"$work/tgtd.log" 2>&1 &
daemon_pids+=($!)
wait_for 20 tgtadm -C "$control_port" --lld iscsi --op show --mode target || die "tgtd did not start"
tgtadm -C "$control_port" --lld iscsi --op new --mode portal --param portal=127.0.0.2:3260 || die "second portal"
mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pods"
start_plugin --mode all --backend local --pool "$work/pool" --tgt-control-port "$control_port" \
  --portal 127.0.0.1:3260 --portal 127.0.0.2:3260 --connector kernel --node-id "$node"

capability='{"mount":{"fs_type":"ext4"},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}'
created=$(csi CreateVolume "{\"name\":\"mp-1\",\"capacity_range\":{\"required_bytes\":67108864},\"volume_capabilities\":[$capability]}") ||
  die "CreateVolume"
volume_id=$(json_get "$created" 'd["volume"]["volume_id"]')
volume_context=$(json_get "$created" 'd["volume"].get("volume_context", {})')
iqn="iqn.2026-11.io.blockcsi:$volume_id"
context=$(csi ControllerPublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\",\"volume_capability\":$capability,\"readonly\":false}") ||
  die "ControllerPublishVolume"
context=$(json_get "$context" 'd["publish_context"]')
staging="$work/staging/$volume_id"

mpath_maps() {
  local dm
  for dm in /sys/block/dm-*; do
    [ -e "$dm/dm/uuid" ] && grep -q '^mpath-' "$dm/dm/uuid" && basename "$dm"
  done
  return 0
}
stage() {
  csi NodeStageVolume "{\"volume_id\":\"$volume_id\",\"publish_context\":$context,\"staging_target_path\":\"$staging\",\"volume_capability\":$capability,\"volume_context\":$volume_context}" >/dev/null ||
    die "NodeStageVolume"
  local sessions source
  sessions=$(sessions_of "$iqn" | wc -l)
  [ "$sessions" -eq 2 ] || die "$sessions sessions to $iqn, not 2"
  source=$(awk -v t="$staging" '$5 == t { for (i = 7; $i != "-"; i++) {} print $(i + 2) }' /proc/self/mountinfo)
  local major_minor dm
  major_minor=$(stat -L -c '%t:%T' "$source")
  dm=$(mpath_maps)
  [ -n "$dm" ] || die "no dm-multipath map after the stage"
  [ "$(printf '%d:%d' "0x${major_minor%:*}" "0x${major_minor#*:}")" = "$(cat "/sys/block/$dm/dev")" ] ||
    die "the staging mount ($source) is not the multipath map $dm"
  [ "$(find "/sys/block/$dm/slaves" -mindepth 1 | wc -l)" -eq 2 ] || die "the map $dm does not hold two paths"
  udevadm settle --timeout 30 || true
  compgen -G "/dev/disk/by-path/ip-127.0.0.2:3260-iscsi-$iqn-lun-1" >/dev/null ||
    die "udev made no /dev/disk/by-path link for the second path"
  echo "staged on $source ($dm over $(find "/sys/block/$dm/slaves" -mindepth 1 -printf '%f '))"
}
unstage() {
  csi NodeUnstageVolume "{\"volume_id\":\"$volume_id\",\"staging_target_path\":\"$staging\"}" >/dev/null || die "NodeUnstageVolume"
  [ -z "$(sessions_of "$iqn")" ] || die "sessions left: $(sessions_of "$iqn")"
  [ -z "$(mpath_maps)" ] || die "multipath map left: $(mpath_maps)"
  ! compgen -G '/sys/block/sd*' >/dev/null || die "an sd disk is left: $(echo /sys/block/sd*)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left"
}

step "stage through two portals"
stage
head -c 1048576 /dev/urandom >"$work/data"
cp "$work/data" "$staging/data" || die "write"
sync -f "$staging/data"
step "unstage: the map is flushed, both sessions end"
unstage
step "stage again: the data is intact"
stage
cmp "$staging/data" "$work/data" || die "the data changed"
unstage
csi ControllerUnpublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\"}" >/dev/null || die "ControllerUnpublishVolume"
csi DeleteVolume "{\"volume_id\":\"$volume_id\"}" >/dev/null || die "DeleteVolume"
step "done"
