#!/bin/bash
# Runs inside the test VM: `blockcsi --connector kernel` with two portals of
# one tgtd target, systemd-udevd and multipathd running. tgtd lives in a
# network namespace of its own, reached over two veth links (one per portal),
# so a path can be cut for real: its link goes down. The stage logs in
# through both portals and mounts the dm-multipath device holding both paths;
# fio writes and verifies on it while one link is cut and restored, with no
# error, the map failing the path and taking it back; the data survives an
# unstage/restage, and the unstage flushes the map and logs out of both.
# The map passes discard: 32 MiB written, deleted and fstrim'd through it
# give >= 90 % of their blocks back in the thin LUN's image.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"
data="${BLOCKCSI_SOURCE_DIR:-$here/../..}/test/testdata"

node=vmnode
control_port=4244
load_modules dm_multipath dm_round_robin dm_service_time
start_iscsid "iqn.2000-01.invalid:not-the-node"
# As open-iscsi advises under dm-multipath: a broken session fails its I/O
# to the map after 5 s (not the default 120 s), so the map retries it on the
# other path. The connector's node records take it from here.
sed -i 's/^node.session.timeo.replacement_timeout = .*/node.session.timeo.replacement_timeout = 5/' /etc/iscsi/iscsid.conf

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
# No name from the host's bindings: the first map is mpatha, as in the fake.
rm -f /etc/multipath/bindings
multipathd -d -s >"$work/multipathd.log" 2>&1 &
daemon_pids+=($!)
wait_for 30 multipathd show daemon || die "multipathd did not start"

step "tgtd in its own network namespace, two veth links, blockcsi --connector kernel"
load_modules veth
ip netns add tgt || die "ip netns add"
for path in a:1 b:2; do
  name=${path%:*} net=${path#*:}
  ip link add "mp$name" type veth peer name "mp${name}t" netns tgt || die "veth mp$name"
  ip addr add "10.200.$net.1/24" dev "mp$name"
  ip link set "mp$name" up
  ip -n tgt addr add "10.200.$net.2/24" dev "mp${name}t"
  ip -n tgt link set "mp${name}t" up
done
ip -n tgt link set lo up
portal_a=10.200.1.2:3260
portal_b=10.200.2.2:3260
# tgtd's control socket is a file: the plugin reaches it from the VM's own
# namespace; the initiator reaches the portals only over the links.
ip netns exec tgt tgtd -f -C "$control_port" --iscsi "portal=$portal_a" >"$work/tgtd.log" 2>&1 &
daemon_pids+=($!)
wait_for 20 tgtadm -C "$control_port" --lld iscsi --op show --mode target || die "tgtd did not start"
tgtadm -C "$control_port" --lld iscsi --op new --mode portal --param "portal=$portal_b" || die "second portal"
mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pods"
start_plugin --mode all --backend local --pool "$work/pool" --tgt-control-port "$control_port" \
  --portal "$portal_a" --portal "$portal_b" --connector kernel --node-id "$node"

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
  compgen -G "/dev/disk/by-path/ip-$portal_b-iscsi-$iqn-lun-1" >/dev/null ||
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

step "the map against the unit tests' fake, test/testdata/sysfs/mpath_dm0"
# session_at <ip>: the session to $iqn through that portal address.
session_at() {
  local s
  for s in $(sessions_of "$iqn"); do
    grep -qx "$1" /sys/class/iscsi_session/"$s"/device/connection*/iscsi_connection/*/persistent_address && echo "$s"
  done
  return 0
}
# path_pairs <fake host> <fake session> <fake disk> <session>: the fake's
# names of one path mapped to the session's.
path_pairs() {
  local scsi host
  scsi=$(basename /sys/class/iscsi_session/"$4"/device/target*/*:1)
  host=$(basename "$(readlink -f "/sys/class/iscsi_session/$4/device/..")")
  echo "host$1=$host session$2=$4 target$1:0:0=target${scsi%%:*}:0:0 $1:0:0:1=$scsi" \
    "$3=$(basename /sys/class/iscsi_session/"$4"/device/target*/*:1/block/*)"
}
dm=$(mpath_maps)
session_a=$(session_at "${portal_a%:*}")
session_b=$(session_at "${portal_b%:*}")
# Another LUN than the fake's: its uuid and size are compared by form, and
# the uuid must carry the paths' WWID as multipath derives it.
wwid=$(cat /sys/class/iscsi_session/"$session_a"/device/target*/*:1/wwid)
expect "the map's uuid is mpath-3 and the paths' NAA ($(cat "/sys/block/$dm/dm/uuid"), $wwid)" \
  test "$(cat "/sys/block/$dm/dm/uuid")" = "mpath-3${wwid#naa.}"
# shellcheck disable=SC2046 # path_pairs prints NAME=NAME words
python3 "$here/compare_fake_sysfs.py" "$data/sysfs/mpath_dm0" / --shape 'uuid=mpath-3[0-9a-f]{32}' --shape 'size=\d+' \
  "dm-0=$dm" $(path_pairs 3 1 sdc "$session_a") $(path_pairs 4 2 sdd "$session_b") ||
  die "test/testdata/sysfs/mpath_dm0 differs from the map multipathd assembled"
head -c 1048576 /dev/urandom >"$work/data"
cp "$work/data" "$staging/data" || die "write"
sync -f "$staging/data"

# active_paths: how many paths of the map multipathd counts as active.
active_paths() {
  multipathd show paths | awk 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["dm_st"] == "active" && $col["chk_st"] == "ready" { n++ } END { print n + 0 }'
}
paths_are() { [ "$(active_paths)" -eq "$1" ]; }
# written_sectors <dm>: sectors written to the map so far.
written_sectors() { awk '{print $7}' "/sys/block/$1/stat"; }
step "fio writes and verifies while the link of $portal_b is cut and restored"
dm=$(mpath_maps)
[ "$(active_paths)" -eq 2 ] || die "not two active paths before the cut: $(multipathd show paths)"
fio --name=pathcut --filename="$staging/fio.dat" --size=32M --bs=16k --rw=randwrite --direct=1 \
  --ioengine=libaio --iodepth=4 --verify=crc32c --verify_backlog=128 --verify_fatal=1 \
  --time_based --runtime=600 --output="$work/fio.out" >"$work/fio.log" 2>&1 &
fio_pid=$!
daemon_pids+=("$fio_pid")
sleep 5
ip link set mpb down
cut_at=$SECONDS
wait_for 90 paths_are 1 ||
  die "the map did not fail the cut path: $(multipathd show paths)"
echo "the map failed the cut path after $((SECONDS - cut_at)) s"
kill -0 "$fio_pid" 2>/dev/null || die "fio ended while a path was cut: $(cat "$work/fio.log" "$work/fio.out")"
before=$(written_sectors "$dm")
sleep 3
[ "$(written_sectors "$dm")" -gt "$before" ] || die "no write reached the map over the remaining path"
ip link set mpb up
restored_at=$SECONDS
wait_for 90 paths_are 2 ||
  die "the map did not take the restored path back: $(multipathd show paths)"
echo "the map took the path back after $((SECONDS - restored_at)) s"
# A few more seconds over both paths, then fio stops (SIGINT: it ends its
# job and reports).
sleep 5
kill -0 "$fio_pid" 2>/dev/null || die "fio ended on its own: $(cat "$work/fio.log" "$work/fio.out")"
kill -INT "$fio_pid"
wait "$fio_pid" || true
grep -q ': err= 0:' "$work/fio.out" || die "fio counted errors: $(cat "$work/fio.log" "$work/fio.out")"
issued=$(sed -n 's/.*issued rwts: total=\([0-9]*\),\([0-9]*\),.*/\1 \2/p' "$work/fio.out")
{ [ "${issued% *}" -gt 0 ] && [ "${issued#* }" -gt 0 ]; } || die "fio did not both write and verify: $(cat "$work/fio.out")"
echo "fio: ${issued#* } writes, ${issued% *} verifying reads, no error"
step "discard through the map: 32 MiB written, deleted, fstrim: the LUN's image gives them back"
# The map stacks on two sd paths of one thin LUN: dm-multipath offers
# discard when its paths do, and passes each discard to one of them.
image="$work/pool/images/$volume_id.img"
max=$(cat "/sys/block/$dm/queue/discard_max_bytes")
[ "$max" -gt 0 ] || die "the multipath map $dm offers no discard (its paths: $(cat /sys/block/"$dm"/slaves/*/queue/discard_max_bytes))"
rm -f "$staging/fio.dat"
# fio's file is preallocated and only partly written: 32 MiB of known
# writes are what the trim must give back.
dd if=/dev/zero of="$staging/big" bs=1M count=32 conv=fsync status=none || die "write 32 MiB"
written=$(($(stat -c '%b * %B' "$image")))
rm "$staging/big"
sync -f "$staging"
fstrim -v "$staging" || die "fstrim through the map"
after=$(($(stat -c '%b * %B' "$image")))
echo "map $dm: discard_max_bytes $max; image allocated $written bytes after writing 32 MiB, $after after" \
  "deleting and fstrim: $((written - after)) bytes given back"
[ $(((written - after) * 10)) -ge $((33554432 * 9)) ] || die "fstrim through the map gave back < 90 % of 32 MiB"
step "unstage: the map is flushed, both sessions end"
unstage
step "stage again: the data is intact"
stage
cmp "$staging/data" "$work/data" || die "the data changed"
unstage
csi ControllerUnpublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\"}" >/dev/null || die "ControllerUnpublishVolume"
csi DeleteVolume "{\"volume_id\":\"$volume_id\"}" >/dev/null || die "DeleteVolume"
step "done"
