#!/bin/bash
# Runs inside the test VM (started by test/vm/krbd_run.sh, which made the
# throw-away Ceph this VM reaches over its tap): `blockcsi --mode all
# --backend rbd --connector kernel`, so the node maps images with
# `rbd device map` into the VM's own kernel (krbd), driven with csi-call.
#   ext4: stage, publish, write; online grow (the image grows, the kernel
#   sees the new size, the node resizes the mounted filesystem); unstage
#   unmaps and leaves no mapping, mount, record or key file; staged again the
#   data is intact.
#   block: a node that keeps its mapping while ControllerUnpublishVolume
#   fences it (its client blocklisted, its exclusive lock broken): its next
#   write fails, and after a new grant a fresh mapping reads the data from
#   before the fence, so no write of the fenced node landed.
#   encrypted ext4 (encrypted: "true"), through krbd and again through the
#   userspace connector (librbd bridge, FUSE, loop): LUKS2 on dm-crypt over
#   the device; a marker written through the filesystem is in none of the
#   image's RADOS objects (read with `rados get`), which do hold the LUKS2
#   header; unstage closes the mapping and restage reads the data back.
# The cephx key reaches the plugin as a NodeStage secret (csi-call holds it
# in its environment, as the kubelet would) and must be in no log, record or
# key file once the calls are done; the same for the encrypted class's key.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

: "${BLOCKCSI_CEPH_CONF:?}" "${BLOCKCSI_CEPH_USER:?}" "${BLOCKCSI_CEPH_KEYRING:?}" "${BLOCKCSI_RBD_POOL:?}"
node=vmnode
load_modules rbd

step "start blockcsi --backend rbd --connector kernel"
mkdir -p "$work/state" "$work/staging" "$work/pods"
plugin_flags=(--mode all --backend rbd --ceph-conf "$BLOCKCSI_CEPH_CONF" --ceph-user "$BLOCKCSI_CEPH_USER"
  --ceph-keyring "$BLOCKCSI_CEPH_KEYRING" --rbd-pool "$BLOCKCSI_RBD_POOL" --connector kernel --node-id "$node")
start_plugin "${plugin_flags[@]}"

CEPH_USER_ID=$BLOCKCSI_CEPH_USER
CEPH_USER_KEY=$(awk '$1 == "key" {print $3}' "$BLOCKCSI_CEPH_KEYRING")
[ -n "$CEPH_USER_KEY" ] || die "no key in $BLOCKCSI_CEPH_KEYRING"
# Only csi-call's environment holds the key (the kubelet's part).
KEK=$(head -c 32 /dev/urandom | base64)
csi() { CEPH_USER_ID=$CEPH_USER_ID CEPH_USER_KEY=$CEPH_USER_KEY KEK=$KEK "${csi_call[@]}" "$@"; }
secret_args=(--secret-env userID=CEPH_USER_ID --secret-env userKey=CEPH_USER_KEY)

# mappings: the kernel's RBD mappings, as "<id> <pool>/<image>" lines.
mappings() {
  local d
  for d in /sys/bus/rbd/devices/*; do
    [ -e "$d/name" ] && echo "$(basename "$d") $(cat "$d/pool")/$(cat "$d/name")"
  done
  return 0
}
# mapping_of <volume id>: the id of the one mapping of the image its
# publish_context names.
mapping_of() {
  local image found
  image=$(json_string "${vol_publish[$1]}" rbdPool)/$(json_string "${vol_publish[$1]}" rbdImage) ||
    die "no rbdPool/rbdImage in publish_context ${vol_publish[$1]}"
  found=$(mappings | awk -v image="$image" '$2 == image {print $1}')
  [ "$(echo "$found" | grep -c .)" = 1 ] || die "not one RBD mapping of $image: $(mappings)"
  echo "$found"
}
nothing_left() {
  [ -z "$(mappings)" ] || die "an RBD mapping is left: $(mappings)"
  ! compgen -G '/sys/block/dm-*' >/dev/null || die "a dm device is left: $(dmsetup ls 2>&1)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
  [ -z "$(attach_records)" ] || die "attach records left: $(attach_records)"
  [ -z "$(find "$work/state" -path '*krbd*' -type f)" ] || die "key files left: $(find "$work/state" -path '*krbd*' -type f)"
}

step "ext4: CreateVolume, ControllerPublishVolume, NodeStageVolume, NodePublishVolume"
create_volume krbd-ext4 ext4 268435456
id=$volume_id
controller_publish "$id"
node_stage "$id"
node_publish "$id"
rbd_id=$(mapping_of "$id")
[ "$(devnum_of "$(staging_of "$id")")" = "$(cat "/sys/block/rbd$rbd_id/dev")" ] ||
  die "the staging mount is not on /dev/rbd$rbd_id"
grep -q " $(target_of "$id") .* - ext4 " /proc/self/mountinfo || die "$(target_of "$id") is not an ext4 mount"

step "the fake krbd sysfs tree the unit tests replay against the kernel's"
# test/testdata/krbd/sysfs/rbd0: the same layout, links and attribute files;
# the values that name this cluster and image are mapped, the ones that
# differ from image to image (sizes, features, ids, addresses) compared by form.
[ "$rbd_id" = 0 ] || die "the first mapping is rbd$rbd_id, not rbd0"
real=/sys/bus/rbd/devices/0
python3 "$here/compare_fake_sysfs.py" "${BLOCKCSI_SOURCE_DIR:-$here/../..}/test/testdata/krbd/sysfs/rbd0/sys" /sys \
  --shape 'size=[0-9]+' --shape 'major=[0-9]+' --shape 'pool_id=[0-9]+' --shape 'features=0x[0-9a-f]{16}' \
  --shape 'client_addr=[0-9.]+:0/[0-9]+' \
  "csi-vol-7f3a9c2e41d04b8e9a512c6e1f0b3d47=$(cat "$real/name")" "1037e80f98be=$(cat "$real/image_id")" \
  "6b22ea62-b897-4aec-8b25-7d8904dc1c6b=$(cat "$real/cluster_fsid")" "client14125=$(cat "$real/client_id")" ||
  die "the fake krbd sysfs tree differs from the kernel's"
head -c 1048576 /dev/urandom >"$work/data-ext4"
{ cp "$work/data-ext4" "$(target_of "$id")/data" && sync -f "$(target_of "$id")/data"; } || die "write on the volume"

step "ext4: grow to 384 MiB while mounted"
before=$(df -B1 --output=size "$(target_of "$id")" | tail -n 1)
capacity=$(grow "$id" 402653184)
[ "$capacity" -ge 402653184 ] || die "NodeExpandVolume reports $capacity bytes"
[ "$(blockdev --getsize64 "/dev/rbd$rbd_id")" -ge 402653184 ] || die "/dev/rbd$rbd_id did not grow"
after=$(df -B1 --output=size "$(target_of "$id")" | tail -n 1)
[ "$after" -gt $((before + 100 * 1048576)) ] || die "ext4 did not grow online: $before -> $after bytes"
cmp "$(target_of "$id")/data" "$work/data-ext4" || die "the file changed while growing"
echo "ext4 on krbd grew online: $before -> $after bytes"

step "ext4: NodeUnpublishVolume, NodeUnstageVolume: unmapped, nothing left"
node_unpublish "$id"
node_unstage "$id"
nothing_left
step "ext4: stage and publish again: the data is intact"
node_stage "$id"
node_publish "$id"
cmp "$(target_of "$id")/data" "$work/data-ext4" || die "the file changed across unstage and stage"
node_unpublish "$id"
node_unstage "$id"
nothing_left
controller_unpublish "$id"
delete_volume "$id"

step "block: a node that keeps its mapping is fenced by ControllerUnpublishVolume"
create_volume krbd-block block 67108864
id=$volume_id
controller_publish "$id"
node_stage "$id"
node_publish "$id"
head -c 1048576 /dev/urandom >"$work/before-fence"
dd if="$work/before-fence" of="$(target_of "$id")" bs=1M count=1 oflag=direct status=none || die "write before the fence"
# The node is not asked to unstage (as when it is unreachable): the
# controller's unpublish must cut its client off.
controller_unpublish "$id"
head -c 1048576 /dev/urandom >"$work/after-fence"
# A fenced client's write fails; the kernel may retry for a while first.
if timeout "$vm_patience_s" dd if="$work/after-fence" of="$(target_of "$id")" bs=1M count=1 oflag=direct \
  status=none 2>"$work/fenced-write.err"; then
  die "the fenced node's write succeeded"
fi
echo "the fenced node's write failed: $(head -n 1 "$work/fenced-write.err")"
dmesg | grep -i -m 3 'blocklist' || true
step "block: the node lets go of the fenced mapping; a new grant reads the data from before the fence"
node_unpublish "$id"
node_unstage "$id"
nothing_left
controller_publish "$id"
node_stage "$id"
node_publish "$id"
cmp <(dd if="$(target_of "$id")" bs=1M count=1 iflag=direct status=none) "$work/before-fence" ||
  die "the volume does not hold the data from before the fence: a fenced write landed"
node_unpublish "$id"
node_unstage "$id"
nothing_left
controller_unpublish "$id"
delete_volume "$id"

rados_() { rados -c "$BLOCKCSI_CEPH_CONF" --id "$BLOCKCSI_CEPH_USER" --keyring "$BLOCKCSI_CEPH_KEYRING" -p "$BLOCKCSI_RBD_POOL" "$@"; }
rbd_() { rbd -c "$BLOCKCSI_CEPH_CONF" --id "$BLOCKCSI_CEPH_USER" --keyring "$BLOCKCSI_CEPH_KEYRING" "$@"; }
# nothing_left_anywhere: neither an RBD mapping, a loop device, a bridge nor a
# dm device is left, nor a mount or record.
nothing_left_anywhere() {
  nothing_left
  [ -z "$(losetup -a)" ] || die "a loop device is left: $(losetup -a)"
  ! pgrep -x blockcsi-bridge >/dev/null || die "a bridge is left: $(pgrep -a -x blockcsi-bridge)"
}
# encrypted_volume_check <connector> <device prefix>: an encrypted ext4
# volume staged through <connector>: LUKS2 on dm-crypt over a device named
# <device prefix>N (rbd: krbd, loop: the bridge's); a marker written through
# the filesystem is in none of the image's RADOS objects, which do hold the
# LUKS2 header; unstaged and staged again the data is intact.
encrypted_volume_check() {
  local connector=$1 under=$2 created id mapping slave marker prefix objects object
  step "encrypted ext4, $connector connector: CreateVolume (encrypted: \"true\"), stage: LUKS2 on dm-crypt over /dev/${under}N"
  created=$(csi --secret-env encryptionKey=KEK CreateVolume "{\"name\":\"enc-$connector\",\"capacity_range\":{\"required_bytes\":67108864},\"volume_capabilities\":[$(capability_json ext4)],\"parameters\":{\"encrypted\":\"true\"}}") ||
    die "CreateVolume of an encrypted volume"
  id=$(json_string "$created" volume_id) || die "no volume_id in $created"
  vol_fs[$id]=ext4
  vol_context[$id]=$(json_object "$created" volume_context)
  controller_publish "$id"
  node_stage "$id"
  mapping=/dev/mapper/$(dmsetup ls | awk '/^blockcsi-/ {print $1}')
  [ -b "$mapping" ] || die "no dm-crypt mapping after the stage: $(dmsetup ls 2>&1)"
  slave=$(ls "/sys/dev/block/$(devnum_of "$mapping")/slaves")
  [[ $slave == "$under"* ]] || die "$mapping is on $slave, not on an $under device"
  [ "$(devnum_of "$(staging_of "$id")")" = "$(devnum_of "$mapping")" ] || die "the staging mount is not on $mapping"
  marker="blockcsi-rbd-marker-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  for _ in $(seq 4096); do printf '%s\n' "$marker"; done >"$work/marker"
  { cp "$work/marker" "$(staging_of "$id")/marker" && sync -f "$(staging_of "$id")/marker"; } ||
    die "write on the encrypted volume"

  step "encrypted ext4, $connector connector: the image's RADOS objects hold the LUKS2 header and never the marker"
  prefix=$(rbd_ info "$BLOCKCSI_RBD_POOL/$(json_string "${vol_publish[$id]}" rbdImage)" --format json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["block_name_prefix"])') || die "rbd info of $id's image"
  objects=$(rados_ ls | grep -F "$prefix." | sort) || die "no RADOS object of the image ($prefix.*)"
  for object in $objects; do
    rados_ get "$object" "$work/object" || die "rados get $object"
    ! grep -qF "$marker" "$work/object" || die "the marker is in plain form in RADOS object $object"
  done
  rados_ get "$prefix.0000000000000000" "$work/object" || die "rados get of the image's first object"
  [ "$(head -c 6 "$work/object" | od -An -tx1 | tr -d ' ')" = 4c554b53babe ] ||
    die "the image's first object does not start with a LUKS header"
  echo "$connector: the marker is in none of the $(echo "$objects" | wc -l) RADOS objects of the image"

  step "encrypted ext4, $connector connector: unstage closes the mapping; staged again the data is intact"
  node_unstage "$id"
  nothing_left_anywhere
  node_stage "$id"
  cmp "$(staging_of "$id")/marker" "$work/marker" || die "the file changed across unstage and stage"
  node_unstage "$id"
  nothing_left_anywhere
  controller_unpublish "$id"
  delete_volume "$id"
}

load_modules dm_crypt
plain_secret_args=("${secret_args[@]}")
secret_args+=(--secret-env encryptionKey=KEK)
encrypted_volume_check kernel rbd
# The same through the userspace connector: the bridge opens the image with
# librbd and serves it through FUSE to a loop device.
kill "$plugin_pid"
wait "$plugin_pid" 2>/dev/null || true
load_modules fuse loop
start_plugin "${plugin_flags[@]/#kernel/userspace}"
encrypted_volume_check userspace loop
secret_args=("${plain_secret_args[@]}")

dmesg >"$work/dmesg.log"
for file in "$work"/*.log; do
  ! grep -qF "$CEPH_USER_KEY" "$file" || die "the cephx key is in $file"
  ! grep -qF "$KEK" "$file" || die "the encrypted class's key is in $file"
done
! grep -rqF "$CEPH_USER_KEY" "$work/state" || die "the cephx key is in the plugin's state"
! grep -rqF "$KEK" "$work/state" || die "the encrypted class's key is in the plugin's state"
step "done"
