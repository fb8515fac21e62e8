#!/bin/bash
# Runs inside the test VM: thin volumes give space back through the kernel
# connector. `blockcsi --mode all --connector kernel` on a tgtd in the same
# VM, then on `blockcsi-target --target lio`, driven with csi-call:
#   the staged sd disk offers discard (queue/discard_max_bytes > 0, the sd
#   driver's provisioning_mode is "unmap"), because the LUN advertises it;
#   256 MiB written, deleted and trimmed gives at least 90 % of what the write
#   allocated in the pool's image back (st_blocks): ext4 mounted with the
#   `discard` mount flag (online discard at the journal commit), xfs with
#   fstrim (tgt and LIO), a raw block volume with blkdiscard from the
#   published device (tgt and LIO);
#   4 MiB that were not deleted read back intact from the target (page cache
#   dropped, direct I/O for the raw volume).
# Arguments name scenarios to run (default all): tgt-ext4 tgt-xfs tgt-block lio-block lio-xfs.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

node=vmnode
mib=1048576
control_port=4242
tgt_portal=127.0.0.1:3260
lio_portal=127.0.0.1:3261
agent_port=7000

# ext4 takes the `discard` mount flag from the StorageClass's mountOptions
# (as the CO passes them in mount_flags); noinit_itable keeps the background
# inode-table zeroing from allocating image blocks while the test measures.
capability_json() { # <ext4|xfs|block>
  case $1 in
  block) echo '{"block":{},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}' ;;
  ext4) echo '{"mount":{"fs_type":"ext4","mount_flags":["discard","noinit_itable"]},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}' ;;
  *) echo "{\"mount\":{\"fs_type\":\"$1\"},\"access_mode\":{\"mode\":\"SINGLE_NODE_WRITER\"}}" ;;
  esac
}

# Bytes the pool's file system holds for a file (st_blocks).
allocated() {
  local blocks unit
  read -r blocks unit < <(stat -c '%b %B' "$1") || return 1
  echo $((blocks * unit))
}
# freed_at_least <image> <bytes allocated after the write> <bytes>
freed_at_least() { [ $(($2 - $(allocated "$1"))) -ge "$3" ]; }

# The pools on a tmpfs of their own: st_blocks then counts what the images
# hold and nothing else, and a punched hole is given back at once.
mkdir -p "$work/pools" "$work/state" "$work/staging" "$work/pods"
mount -t tmpfs -o size=1g pools "$work/pools" || die "tmpfs for the pools"
mkdir -p "$work/pools/tgt" "$work/pools/lio"
# Not the node's initiator name: the connector's own iface must carry that.
start_iscsid "iqn.2000-01.invalid:not-the-node"

# thin_check <ext4|xfs|block> <pool dir>: the scenario on the running plugin.
thin_check() {
  local fs=$1 pool=$2 id iqn disk image target keep_at=300 big=256 max mode before written trimmed added freed what
  what="$fs on $(basename "$pool")"
  step "$what: CreateVolume (448 MiB), publish, stage"
  create_volume "thin-$fs-$(basename "$pool")" "$fs" $((448 * mib))
  id=$volume_id
  iqn="iqn.2026-11.io.blockcsi:$id"
  image="$pool/images/$id.img"
  target=$(target_of "$id")
  controller_publish "$id"
  node_stage "$id"
  node_publish "$id"
  disk=$(disk_of "$(sessions_of "$iqn")")
  [ -n "$disk" ] || die "no disk behind the session to $iqn"
  max=$(cat "/sys/block/$disk/queue/discard_max_bytes")
  mode=$(cat /sys/block/"$disk"/device/scsi_disk/*/provisioning_mode)
  echo "$disk: discard_max_bytes $max, provisioning_mode $mode"
  [ "$max" -gt 0 ] || die "the kernel offers no discard on $disk (provisioning_mode $mode): the LUN is not thin"

  step "$what: write 4 MiB to keep, then 256 MiB to delete"
  head -c $((4 * mib)) /dev/urandom >"$work/keep"
  if [ "$fs" = block ]; then
    dd if="$work/keep" of="$target" bs=1M seek="$keep_at" oflag=direct status=none || die "write the kept data"
  else
    { cp "$work/keep" "$target/keep" && sync -f "$target/keep"; } || die "write the kept file"
  fi
  before=$(allocated "$image")
  # Zeros are data all the way down (neither the file systems, nor tgtd's
  # or LIO's file backstores, nor the pool's tmpfs skip them): each block
  # lands in the image, which the check below confirms; and dd from
  # /dev/zero is the cheapest writer under TCG.
  if [ "$fs" = block ]; then
    dd if=/dev/zero of="$target" bs=1M count="$big" oflag=direct status=none || die "write $big MiB to $target"
  else
    dd if=/dev/zero of="$target/big" bs=1M count="$big" conv=fsync status=none || die "write $big MiB"
  fi
  written=$(allocated "$image")
  added=$((written - before))
  [ "$added" -ge $((big * mib * 9 / 10)) ] || die "the write allocated only $added bytes of the image"

  step "$what: delete and trim"
  case $fs in
  ext4) { rm "$target/big" && sync -f "$target"; } || die "delete on ext4" ;;
  xfs) { rm "$target/big" && sync -f "$target" && fstrim -v "$target"; } || die "delete and fstrim on xfs" ;;
  block) blkdiscard -o 0 -l $((big * mib)) "$target" || die "blkdiscard of $target" ;;
  esac
  # ext4 issues its discards after the journal commit that frees the blocks.
  wait_for 120 freed_at_least "$image" "$written" $((added * 9 / 10)) || true
  trimmed=$(allocated "$image")
  freed=$((written - trimmed))
  echo "$what: image allocated $before bytes before the write, $written after it, $trimmed after the trim:" \
    "$freed of the $added bytes the write added given back ($((freed * 100 / added)) %)"
  [ $((freed * 10)) -ge $((added * 9)) ] || die "$what gave back $freed of $added bytes (< 90 %)"

  step "$what: the data not deleted reads back from the target"
  sync
  echo 3 >/proc/sys/vm/drop_caches
  if [ "$fs" = block ]; then
    cmp <(dd if="$target" bs=1M skip="$keep_at" count=4 iflag=direct status=none) "$work/keep" ||
      die "the kept data changed"
  else
    cmp "$target/keep" "$work/keep" || die "the kept file changed"
  fi
  node_unpublish "$id"
  node_unstage "$id"
  controller_unpublish "$id"
  delete_volume "$id"
  [ ! -e "$image" ] || die "the image of $id is left"
}

# One plugin at a time on the CSI endpoint.
stop_plugin() {
  [ -n "${plugin_pid:-}" ] || return 0
  kill "$plugin_pid"
  wait "$plugin_pid" 2>/dev/null || true
  plugin_pid=
}
start_tgt_plugin() {
  step "start tgtd and blockcsi --backend local --connector kernel"
  stop_plugin
  start_tgtd "$control_port" "$tgt_portal"
  start_plugin --mode all --backend local --pool "$work/pools/tgt" --tgt-control-port "$control_port" \
    --portal "$tgt_portal" --connector kernel --node-id "$node"
}
start_lio_plugin() {
  step "start blockcsi-target --target lio and blockcsi --backend remote --connector kernel"
  stop_plugin
  load_modules target_core_mod target_core_file iscsi_target_mod
  mount_configfs
  "$bin/blockcsi-target" --pool "$work/pools/lio" --target lio --portal "$lio_portal" \
    --listen "127.0.0.1:$agent_port" --insecure --reconcile-interval 1h >>"$work/agent.log" 2>&1 &
  daemon_pids+=($!)
  wait_for 60 grep -q "serving" "$work/agent.log" || die "blockcsi-target did not start"
  start_plugin --mode all --backend remote --target-agent "127.0.0.1:$agent_port" --insecure \
    --connector kernel --node-id "$node"
}

scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(tgt-ext4 tgt-xfs tgt-block lio-block lio-xfs)
running=
for scenario in "${scenarios[@]}"; do
  case $scenario in
  tgt-*) [ "$running" = tgt ] || start_tgt_plugin ;;
  lio-*) [ "$running" = lio ] || start_lio_plugin ;;
  esac
  running=${scenario%%-*}
  case $scenario in
  tgt-ext4 | tgt-xfs | tgt-block) thin_check "${scenario#tgt-}" "$work/pools/tgt" ;;
  lio-block) thin_check block "$work/pools/lio" ;;
  lio-xfs) thin_check xfs "$work/pools/lio" ;;
  *) die "no scenario $scenario" ;;
  esac
done
stop_daemons
umount "$work/pools" || die "umount the pools' tmpfs"
step "done"
