#!/bin/bash
# Runs inside the test VM: `blockcsi --mode all --connector kernel` on a tgtd
# in the same VM, driven with csi-call, through iscsid + iscsiadm into the
# VM's own kernel.
#   Without udevd (no /dev/disk/by-*): ext4 with mutual CHAP and raw block
#   with one-way CHAP; the identity check against the disk's real VPD pages
#   (a publish_context naming another unit serial, then another WWN, is
#   refused and leaves nothing behind); wrong CHAP secrets either way are
#   refused with nothing left behind.
#   With systemd-udevd running (by-id and by-path links come and go): xfs and
#   btrfs.
#   Each: create, publish, stage, publish, write; unpublish, unstage leaves no
#   session, sd device or mount; stage again and the data is intact; ext4 and
#   xfs then grow online (the LUN grows, the node rescans and resizes the
#   mounted filesystem, the data stays); then everything is taken down.
#   CHAP secrets are in no process's argv or environment (csi-call, playing
#   the kubelet, holds them in its environment) the whole time, in no log, in
#   no attach record, and in no iSCSI node record once the volumes are gone.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

node=vmnode
portal=127.0.0.1:3260
control_port=4242
# Not the node's initiator name: the connector's own iface must carry that.
start_iscsid "iqn.2000-01.invalid:not-the-node"

step "start tgtd and blockcsi --connector kernel"
tgtd -f -C "$control_port" --iscsi "portal=$portal" >"$work/tgtd.log" 2>&1 &
daemon_pids+=($!)
wait_for "$vm_patience_s" tgtadm -C "$control_port" --lld iscsi --op show --mode target || die "tgtd did not start"
mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pods"
start_plugin --mode all --backend local --pool "$work/pool" --tgt-control-port "$control_port" \
  --portal "$portal" --connector kernel --node-id "$node"

random_secret() { echo "$1-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
CHAP_USER=vmnode-chap
CHAP_SECRET=$(random_secret chap)
CHAP_MUTUAL_USER=vmtarget-chap
CHAP_MUTUAL_SECRET=$(random_secret mutual)
WRONG_SECRET=$(random_secret wrong)
one_way=(--secret-env chap-username=CHAP_USER --secret-env chap-password=CHAP_SECRET)
mutual=("${one_way[@]}" --secret-env chap-mutual-username=CHAP_MUTUAL_USER
  --secret-env chap-mutual-password=CHAP_MUTUAL_SECRET)
wrong_mutual=("${one_way[@]}" --secret-env chap-mutual-username=CHAP_MUTUAL_USER
  --secret-env chap-mutual-password=WRONG_SECRET)
wrong_one_way=(--secret-env chap-username=CHAP_USER --secret-env chap-password=WRONG_SECRET)
# Only csi-call's environment holds them: the plugin and what it runs must
# never see one there.
csi() {
  CHAP_USER=$CHAP_USER CHAP_SECRET=$CHAP_SECRET CHAP_MUTUAL_USER=$CHAP_MUTUAL_USER \
    CHAP_MUTUAL_SECRET=$CHAP_MUTUAL_SECRET WRONG_SECRET=$WRONG_SECRET \
    "${csi_call[@]}" "$@"
}
secrets_list() { printf '%s\n' "$CHAP_SECRET" "$CHAP_MUTUAL_SECRET" "$WRONG_SECRET"; }

python3 "$here/secret_watch.py" "$work/secret-leaks" --allow-environ csi-call < <(secrets_list) >"$work/watch.out" 2>&1 &
watcher_pid=$!
daemon_pids+=("$watcher_pid")
wait_for "$vm_patience_s" grep -qx watching "$work/watch.out" || die "the secret watcher did not start: $(cat "$work/watch.out")"

# nothing_left <iqn>: no session, no sd disk, no mount of ours, no record.
nothing_left() {
  [ -z "$(sessions_of "$1")" ] || die "a session to $1 is left"
  ! compgen -G '/sys/block/sd*' >/dev/null || die "an sd disk is left: $(echo /sys/block/sd*)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
  [ -z "$(attach_records)" ] || die "attach records left: $(attach_records)"
  [ ! -e "/etc/iscsi/nodes/$1" ] || [ -z "$(ls "/etc/iscsi/nodes/$1")" ] || die "a node record of $1 is left"
}

# udev_link_to <disk>: whether a /dev/disk/by-id or by-path link names the disk.
udev_link_to() {
  local link
  for link in /dev/disk/by-id/* /dev/disk/by-path/*; do
    [ -L "$link" ] && [ "$(readlink -f "$link")" = "/dev/$1" ] && return 0
  done
  return 1
}
no_udev_link_to() { ! udev_link_to "$1"; }
# udev_links <udev: on|off> <disk> <present|gone>: with udevd, the links
# follow the disk once udevd has worked through its events (a wait: under TCG
# on a loaded machine that took longer than `udevadm settle --timeout 30`);
# without it, there must never be one.
udev_links() {
  if [ "$1" = off ]; then
    no_udev_link_to "$2" || die "/dev/disk/by-* names $2 without udevd running"
  elif [ "$3" = present ]; then
    wait_for "$vm_patience_s" udev_link_to "$2" ||
      die "udev made no /dev/disk/by-* link for $2 (links: $(find /dev/disk -type l -printf '%p ' 2>&1))"
  else
    wait_for "$vm_patience_s" no_udev_link_to "$2" || die "/dev/disk/by-* still names $2 after the unstage"
  fi
}

# lifecycle <ext4|xfs|btrfs|block> <chap: no|one-way|mutual> <udev: on|off> <grow: yes|no>
lifecycle() {
  local fs=$1 chap=$2 udev=$3 grow_too=$4 parameters='{}' id iqn staging target disk session
  [ "$chap" = no ] || parameters='{"chap":"true"}'
  case $chap in
  no) secret_args=() ;;
  one-way) secret_args=("${one_way[@]}") ;;
  mutual) secret_args=("${mutual[@]}") ;;
  esac
  step "$fs (CHAP $chap, udev $udev): CreateVolume, ControllerPublishVolume"
  # 320 MiB: mkfs.xfs refuses less than 300 MB.
  create_volume "kc-$fs" "$fs" 335544320 "$parameters"
  id=$volume_id
  iqn="iqn.2026-11.io.blockcsi:$id"
  staging=$(staging_of "$id")
  target=$(target_of "$id")
  controller_publish "$id"

  case $chap in
  mutual)
    step "$fs: a target that cannot prove the node's mutual secret is refused for good"
    csi_fails FAILED_PRECONDITION "${wrong_mutual[@]}" NodeStageVolume "$(stage_request "$id")"
    nothing_left "$iqn"
    ;;
  one-way)
    step "$fs: a node with the wrong CHAP secret is refused"
    csi_fails PERMISSION_DENIED "${wrong_one_way[@]}" NodeStageVolume "$(stage_request "$id")"
    nothing_left "$iqn"
    ;;
  esac

  step "$fs: NodeStageVolume, NodePublishVolume, write"
  node_stage "$id"
  node_publish "$id"
  session=$(sessions_of "$iqn")
  [ -n "$session" ] || die "no kernel iSCSI session to $iqn after the stage"
  [ "$(cat "/sys/class/iscsi_session/$session/initiatorname")" = "iqn.2026-11.io.blockcsi:node:$node" ] ||
    die "the session's initiator is $(cat "/sys/class/iscsi_session/$session/initiatorname"), not the node's"
  case $chap in
  one-way | mutual)
    [ "$(cat "/sys/class/iscsi_session/$session/username")" = "$CHAP_USER" ] || die "the session did not use CHAP"
    ;;
  esac
  if [ "$chap" = mutual ]; then
    [ "$(cat "/sys/class/iscsi_session/$session/username_in")" = "$CHAP_MUTUAL_USER" ] ||
      die "the session did not authenticate the target (username_in: $(cat "/sys/class/iscsi_session/$session/username_in"))"
  fi
  disk=$(disk_of "$session")
  if [ "$fs" = block ]; then
    [ "$(devnum_of "$target")" = "$(cat "/sys/block/$disk/dev")" ] || die "$target is not the session's disk $disk"
  else
    [ "$(devnum_of "$staging")" = "$(cat "/sys/block/$disk/dev")" ] || die "$staging is not on the session's disk $disk"
  fi
  udev_links "$udev" "$disk" present
  head -c 1048576 /dev/urandom >"$work/data-$fs"
  if [ "$fs" = block ]; then
    [ -b "$target" ] || die "$target is not a block device"
    dd if="$work/data-$fs" of="$target" bs=1M count=1 oflag=direct status=none || die "write to $target"
  else
    grep -q " $target .* - $fs " /proc/self/mountinfo || die "$target is not an $fs mount"
    cp "$work/data-$fs" "$target/data" || die "write a file on $target"
    sync -f "$target/data" || die "sync $target/data"
  fi

  step "$fs: NodeUnpublishVolume, NodeUnstageVolume: nothing left"
  node_unpublish "$id"
  node_unstage "$id"
  nothing_left "$iqn"
  udev_links "$udev" "$disk" gone
  step "$fs: stage and publish again: the data is intact"
  node_stage "$id"
  node_publish "$id"
  if [ "$fs" = block ]; then
    cmp <(dd if="$target" bs=1M count=1 iflag=direct status=none) "$work/data-$fs" || die "the raw data changed"
  else
    cmp "$target/data" "$work/data-$fs" || die "the file changed"
  fi

  if [ "$grow_too" = yes ]; then
    step "$fs: grow to 448 MiB while mounted"
    local before after capacity
    dmesg -C
    before=$(df -B1 --output=size "$target" | tail -n 1)
    capacity=$(grow "$id" 469762048)
    [ "$capacity" -ge 469762048 ] || die "NodeExpandVolume reports $capacity bytes"
    disk=$(disk_of "$(sessions_of "$iqn")")
    [ "$(blockdev --getsize64 "/dev/$disk")" -ge 469762048 ] || die "the disk $disk did not grow"
    after=$(df -B1 --output=size "$target" | tail -n 1)
    # The filesystem grew by most of the 128 MiB the disk did.
    [ "$after" -gt $((before + 100 * 1048576)) ] || die "$fs did not grow online: $before -> $after bytes"
    cmp "$target/data" "$work/data-$fs" || die "the file changed while growing"
    ! dmesg | grep -E 'I/O error|EXT4-fs error|XFS .*(error|Corruption)' || die "I/O or filesystem errors while the LUN grew"
    { head -c 1048576 /dev/urandom >"$target/after-grow" && sync -f "$target/after-grow"; } ||
      die "write after the grow"
    echo "$fs grew online: $before -> $after bytes"
  fi
  node_unpublish "$id"
  node_unstage "$id"
  nothing_left "$iqn"
  step "$fs: ControllerUnpublishVolume, DeleteVolume"
  controller_unpublish "$id"
  delete_volume "$id"
  ! tgtadm -C "$control_port" --lld iscsi --op show --mode target | grep -q "$id" ||
    die "tgtd still has the target of $id"
  [ -z "$(ls "$work/pool/images")" ] || die "images left in the pool: $(ls "$work/pool/images")"
  secret_args=()
}

# identity_check: the node reads the disk's VPD page 0x80 (unit serial) and
# page 0x83 (NAA designators) from the kernel and refuses a LUN that is not
# the one publish_context names, leaving nothing behind; the right one stages.
identity_check() {
  local id iqn context serial wwn
  step "identity: a publish_context naming another LUN is refused"
  create_volume kc-identity block 67108864
  id=$volume_id
  iqn="iqn.2026-11.io.blockcsi:$id"
  controller_publish "$id"
  context=${vol_publish[$id]}
  serial=$(json_string "$context" serial) || die "no serial in publish_context $context"
  wwn=$(json_string "$context" wwn) || die "no wwn in publish_context $context"
  csi_fails FAILED_PRECONDITION NodeStageVolume "$(stage_request "$id" "${context/\"serial\":\"$serial\"/\"serial\":\"${serial}x\"}")"
  grep -q "serial" "$work/call.err" || die "the refusal does not name the serial: $(cat "$work/call.err")"
  nothing_left "$iqn"
  # Another NAA 6 WWN: the last digit changed.
  local other_wwn=${wwn%?}0
  [ "${wwn: -1}" != 0 ] || other_wwn=${wwn%?}1
  csi_fails FAILED_PRECONDITION NodeStageVolume "$(stage_request "$id" "${context/\"wwn\":\"$wwn\"/\"wwn\":\"$other_wwn\"}")"
  nothing_left "$iqn"
  step "identity: the published serial and WWN are the disk's own"
  node_stage "$id"
  local disk
  disk=$(disk_of "$(sessions_of "$iqn")")
  # sg_vpd decodes the pages the kernel read, independently of our parser.
  sg_vpd --page=0x80 "/dev/$disk" | grep -q "$serial" || die "VPD 0x80 of $disk does not carry $serial"
  sg_vpd --page=0x83 "/dev/$disk" | tr -d ' ' | grep -qi "0x$wwn" || die "VPD 0x83 of $disk does not carry $wwn"
  node_unstage "$id"
  nothing_left "$iqn"
  controller_unpublish "$id"
  delete_volume "$id"
}

# The scenarios in order (all by default; naming some runs only those, for
# work on one of them: vm_run.sh kernel_connector_check.sh btrfs).
scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(ext4 identity block udevd xfs btrfs)
[ ! -e /dev/disk/by-id ] || die "/dev/disk/by-id exists before udevd runs"
udev=off
for scenario in "${scenarios[@]}"; do
  case $scenario in
  ext4) lifecycle ext4 mutual "$udev" yes ;;
  identity) identity_check ;;
  block) lifecycle block one-way "$udev" no ;;
  udevd)
    step "start systemd-udevd"
    # No coldplug (udevadm trigger): only the disks the tests bring matter,
    # and their add events reach udevd by themselves.
    /lib/systemd/systemd-udevd --daemon >"$work/udevd.log" 2>&1 || die "systemd-udevd"
    udev=on
    ;;
  xfs) lifecycle xfs no "$udev" yes ;;
  btrfs) lifecycle btrfs one-way "$udev" no ;;
  *) die "no scenario $scenario" ;;
  esac
done

kill "$watcher_pid" 2>/dev/null || die "the secret watcher stopped before the end: $(cat "$work/watch.out")"
wait "$watcher_pid" 2>/dev/null || true
[ ! -s "$work/secret-leaks" ] || die "a CHAP secret was in: $(sort -u "$work/secret-leaks")"
dmesg >"$work/dmesg.log"
for file in "$work"/*.log; do
  ! grep -qF -f <(secrets_list) "$file" || die "a CHAP secret is in $file"
done
! grep -rqF -f <(secrets_list) "$work/state" || die "a CHAP secret is in the plugin's state"
! grep -rqF -f <(secrets_list) /etc/iscsi || die "a CHAP secret is left in /etc/iscsi"
step "done"
