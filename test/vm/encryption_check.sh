#!/bin/bash
# Runs inside the test VM: an encrypted volume (LUKS2 on dm-crypt) staged by
# `blockcsi --mode all --connector kernel` on a tgtd in the same VM.
#   A stage without the key Secret is INVALID_ARGUMENT, with a Secret of
#   another class (the wrapped key does not open) or with a data key the
#   volume's LUKS header does not take, PERMISSION_DENIED: each leaves no
#   session, mapping, mount or record, and the header is never rewritten.
#   A stage with the right Secret formats the blank LUN as LUKS2, opens it,
#   makes ext4 on the mapping; a marker written through the filesystem is
#   never in the backing image file; unstage closes the mapping and logs
#   out; restage finds the data; an online grow resizes the mapping, then
#   the filesystem, and keeps the data; a plugin killed (SIGKILL) while the
#   volume is staged is restarted and unstages it (mapping closed); after a
#   second kill with the mounts gone, `blockctl cleanup --apply` closes the
#   mapping and logs out; a plugin killed with its children in the middle
#   of `cryptsetup luksFormat` (the first stage) or `cryptsetup open` is
#   restarted and the retried stage converges: one mapping, one session,
#   after the open the same LUKS header and the data intact. The mapping
#   holds at least the bytes asked for (the controller adds the LUKS2
#   header to the LUN), after CreateVolume and after the grow. The key Secret and the data key are in no
#   process's argv or environment (csi-call, playing the kubelet, holds the
#   Secret in its environment) the whole time, in no log and in no record.
#   The same through the userspace connector (libiscsi bridge, FUSE file,
#   loop device, dm-crypt on the loop device): the marker is not in the
#   image, the data survives unstage/restage, nothing is left after.
#   The volume is made by CreateVolume of an encrypted class (the
#   controller makes and wraps the data key); the test opens the wrapped key
#   independently (Python) to know what to watch for.
#   With `fio` as argument: the cost of dm-crypt, fio on the mapping against
#   the same LUN unencrypted, as a ratio (TCG: never an absolute figure).
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

node=vmnode
portal=127.0.0.1:3260
control_port=4242
load_modules dm_crypt
start_iscsid "iqn.2000-01.invalid:not-the-node"

step "start tgtd and blockcsi --connector kernel"
start_tgtd "$control_port" "$portal"
mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pods"
plugin_flags=(--mode all --backend local --pool "$work/pool" --tgt-control-port "$control_port"
  --portal "$portal" --connector kernel --node-id "$node")
start_plugin "${plugin_flags[@]}"

KEK=$(head -c 32 /dev/urandom | base64)
OTHER_KEK=$(head -c 32 /dev/urandom | base64)
secret_args=(--secret-env encryptionKey=KEK)
csi() { KEK=$KEK OTHER_KEK=$OTHER_KEK "${csi_call[@]}" "$@"; }
# watch <name> <secret>...: a watcher of every process's argv and environ for
# these (csi-call, playing the sidecars and the kubelet, may hold them in
# its environment), from now to the end.
watchers=()
watch() {
  local name=$1
  shift
  python3 "$here/secret_watch.py" "$work/leaks-$name" --allow-environ csi-call < <(printf '%s\n' "$@") \
    >"$work/watch-$name.out" 2>&1 &
  daemon_pids+=($!)
  watchers+=($!)
  wait_for "$vm_patience_s" grep -qx watching "$work/watch-$name.out" ||
    die "the $name watcher did not start: $(cat "$work/watch-$name.out")"
}
watch kek "$KEK" "$OTHER_KEK"

step "CreateVolume (encrypted: \"true\"), ControllerPublishVolume: the wrapped data key"
created=$(csi "${secret_args[@]}" CreateVolume "{\"name\":\"enc\",\"capacity_range\":{\"required_bytes\":134217728},\"volume_capabilities\":[$(capability_json ext4)],\"parameters\":{\"encrypted\":\"true\"}}") ||
  die "CreateVolume"
id=$(json_string "$created" volume_id) || die "no volume_id in $created"
[[ $created =~ \"capacity_bytes\":\"?134217728[\",] ]] || die "CreateVolume reports another capacity than asked: $created"
vol_fs[$id]=ext4
vol_context[$id]=$(json_object "$created" volume_context)
[[ ${vol_context[$id]} == *'"encryption":"luks2"'* ]] || die "volume_context does not mark it encrypted: $created"
iqn="iqn.2026-11.io.blockcsi:$id"
controller_publish "$id"
wrapped=$(json_string "${vol_publish[$id]}" wrappedDataKey) || die "no wrappedDataKey in ${vol_publish[$id]}"
published=${vol_publish[$id]}
# The data key, opened from the wrapped form as src/contract/volume_key.h
# says (AES-256-GCM under the KEK, the volume id bound in), by Python, with
# the keys on its stdin: the watcher must know what to look for. And another
# data key wrapped the same way, which the volume's LUKS header will not take.
keys=$(python3 -c 'import base64, os, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
kek, wrapped = sys.stdin.read().split()
aead, vid, blob = AESGCM(base64.b64decode(kek)), sys.argv[1].encode(), base64.b64decode(wrapped[3:])
key = aead.decrypt(blob[:12], blob[12:], vid)
other, nonce = os.urandom(32), os.urandom(12)
print(key.hex(), base64.b64encode(key).decode(), other.hex(),
      "v1." + base64.b64encode(nonce + aead.encrypt(nonce, other, vid)).decode())' "$id" <<<"$KEK $wrapped") ||
  die "the wrapped data key does not open under the class's KEK"
read -r DATA_KEY data_key_b64 OTHER_DATA_KEY wrapped_other <<<"$keys"
watch data-key "$DATA_KEY" "$data_key_b64" "$OTHER_DATA_KEY"
secrets_list() { printf '%s\n' "$KEK" "$OTHER_KEK" "$DATA_KEY" "$OTHER_DATA_KEY" "$data_key_b64"; }
! grep -rqF -f <(secrets_list) "$work/pool" || die "a key is in the pool in plain form"

image=$(find "$work/pool" -type f -size +1M | head -n 1)
[ -f "$image" ] || die "no backing image file in $work/pool"
# nothing_left: no session, sd disk, dm device, mount or record.
nothing_left() {
  [ -z "$(sessions_of "$iqn")" ] || die "a session to $iqn is left"
  ! compgen -G '/sys/block/sd*' >/dev/null || die "an sd disk is left: $(echo /sys/block/sd*)"
  ! compgen -G '/sys/block/dm-*' >/dev/null || die "a dm device is left: $(dmsetup ls 2>&1)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
  [ -z "$(attach_records)" ] || die "attach records left: $(attach_records)"
}
header_sum() { head -c 1048576 "$image" | md5sum; }

step "no key Secret: INVALID_ARGUMENT; a Secret of another class: PERMISSION_DENIED; nothing attached"
csi_fails INVALID_ARGUMENT NodeStageVolume "$(stage_request "$id")"
grep -q encryptionKey "$work/call.err" || die "the refusal does not name the secret: $(cat "$work/call.err")"
csi_fails PERMISSION_DENIED --secret-env encryptionKey=OTHER_KEK NodeStageVolume "$(stage_request "$id")"
nothing_left

# stage_killed_in <regex>: NodeStageVolume of $id while a watcher kills the
# plugin and its children (as a container runtime would) the moment it runs
# a child matching regex. False when the stage finished before the kill.
stage_killed_in() {
  local killer
  python3 "$here/kill_when.py" "$plugin_pid" "$1" --tree >"$work/kill.out" 2>&1 &
  killer=$!
  sleep 0.5 # the killer's first look at /proc before the call starts
  if csi "${secret_args[@]}" NodeStageVolume "$(stage_request "$id")" >/dev/null 2>"$work/call.err"; then
    kill "$killer" 2>/dev/null || true
    wait "$killer" 2>/dev/null || true
    return 1
  fi
  wait "$killer" || die "the stage failed but the plugin was not killed: $(cat "$work/kill.out" "$work/call.err")"
  echo "$(cat "$work/kill.out"); the call said: $(cat "$work/call.err")"
  wait "$plugin_pid" 2>/dev/null || true
}
# restart_and_stage: the plugin restarted, NodeStageVolume of $id retried
# until it succeeds (as the kubelet would).
restart_and_stage() {
  local attempt
  start_plugin "${plugin_flags[@]}"
  for attempt in 1 2 3 4 5; do
    csi "${secret_args[@]}" NodeStageVolume "$(stage_request "$id")" >/dev/null 2>"$work/call.err" && return 0
    echo "retry $attempt: $(cat "$work/call.err")"
    sleep 2
  done
  die "NodeStageVolume did not converge after the kill: $(cat "$work/call.err")"
}

step "stage, the plugin killed (SIGKILL, with its children) in the middle of cryptsetup luksFormat; restarted, the stage converges: the blank LUN becomes LUKS2, ext4 is made on the mapping"
stage_killed_in 'cryptsetup luksFormat ' || die "the stage finished before luksFormat could be killed"
restart_and_stage
grep -E 'formatting LUKS2|without a keyslot' "$work/plugin.log" | cut -c1-200
[ "$(dmsetup ls | grep -c '^blockcsi-')" -eq 1 ] || die "not exactly one mapping: $(dmsetup ls 2>&1)"
[ "$(sessions_of "$iqn" | wc -l)" -eq 1 ] || die "not exactly one session to $iqn"
node_publish "$id"
mapping=/dev/mapper/$(dmsetup ls | awk '/^blockcsi-/ {print $1}')
[ -b "$mapping" ] || die "no mapping after the stage: $(dmsetup ls 2>&1)"
disk=$(disk_of "$(sessions_of "$iqn")")
cryptsetup status "$(basename "$mapping")" | grep -q "type: *LUKS2" || die "$mapping is not LUKS2"
[ "$(ls "/sys/dev/block/$(devnum_of "$mapping")/slaves")" = "$disk" ] || die "$mapping is not on $disk"
[ "$(devnum_of "$(staging_of "$id")")" = "$(devnum_of "$mapping")" ] || die "the staging mount is not on $mapping"
[ "$(head -c 4 "/dev/$disk")" = LUKS ] || die "/dev/$disk carries no LUKS header"
# The controller made the LUN bigger by the LUKS2 header: the pod gets the
# 128 MiB asked for, not 16 MiB less.
mapping_bytes=$(blockdev --getsize64 "$mapping")
[ "$mapping_bytes" -ge 134217728 ] || die "the mapping holds $mapping_bytes bytes, 134217728 were asked for"
echo "mapping $mapping_bytes bytes on a $(blockdev --getsize64 "/dev/$disk")-byte LUN for 134217728 asked"
"$bin/blockctl" --state-dir "$work/state" --endpoint "$csi_endpoint" volumes | grep -q "luks2 $mapping" ||
  die "blockctl volumes does not show the mapping: $("$bin/blockctl" --state-dir "$work/state" volumes 2>&1)"

step "a marker written through the filesystem is not in the backing image"
marker="blockcsi-marker-$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')"
for _ in $(seq 4096); do echo "$marker"; done >"$work/marker"
{ cp "$work/marker" "$(target_of "$id")/marker" && sync -f "$(target_of "$id")/marker"; } || die "write the marker"
grep -qF "$marker" "$work/marker" || die "the marker search finds nothing even in the plain copy"
! grep -qaF "$marker" "$image" || die "the marker is in the backing image in plain text"

step "unstage closes the mapping; a data key the header does not take is PERMISSION_DENIED"
node_unpublish "$id"
node_unstage "$id"
nothing_left
before=$(header_sum)
vol_publish[$id]=${published/$wrapped/$wrapped_other}
csi_fails PERMISSION_DENIED "${secret_args[@]}" NodeStageVolume "$(stage_request "$id")"
nothing_left
[ "$(header_sum)" = "$before" ] || die "the refused stage changed the LUKS header"
vol_publish[$id]=$published

step "restage: the data is intact"
node_stage "$id"
node_publish "$id"
cmp "$(target_of "$id")/marker" "$work/marker" || die "the marker changed"

step "grow to 192 MiB while mounted: the mapping, then ext4"
size_before=$(blockdev --getsize64 "$mapping")
fs_before=$(df -B1 --output=size "$(target_of "$id")" | tail -n 1)
capacity=$(grow "$id" 201326592)
[ "$capacity" -ge 201326592 ] || die "NodeExpandVolume reports $capacity bytes"
[ "$(blockdev --getsize64 "$mapping")" -ge 201326592 ] || die "the grown mapping holds $(blockdev --getsize64 "$mapping") bytes"
[ "$(blockdev --getsize64 "$mapping")" -gt $((size_before + 60 * 1048576)) ] || die "$mapping did not grow"
fs_after=$(df -B1 --output=size "$(target_of "$id")" | tail -n 1)
[ "$fs_after" -gt $((fs_before + 50 * 1048576)) ] || die "ext4 did not grow: $fs_before -> $fs_after"
cmp "$(target_of "$id")/marker" "$work/marker" || die "the marker changed while growing"
echo "grew online: mapping $size_before -> $(blockdev --getsize64 "$mapping"), ext4 $fs_before -> $fs_after bytes"

step "plugin killed (SIGKILL) while staged; restarted, it unstages: mapping closed"
kill -KILL "$plugin_pid"
wait "$plugin_pid" 2>/dev/null || true
start_plugin "${plugin_flags[@]}"
node_unpublish "$id"
node_unstage "$id"
nothing_left

step "plugin killed with the volume staged, mounts gone: blockctl cleanup closes the mapping"
node_stage "$id"
kill -KILL "$plugin_pid"
wait "$plugin_pid" 2>/dev/null || true
umount "$(staging_of "$id")" || die "umount the staging path"
"$bin/blockctl" --state-dir "$work/state" --endpoint "$csi_endpoint" cleanup --apply >"$work/cleanup.out" 2>&1 ||
  die "blockctl cleanup --apply: $(cat "$work/cleanup.out")"
grep -q close-mapping "$work/cleanup.out" || die "cleanup closed no mapping: $(cat "$work/cleanup.out")"
nothing_left
start_plugin "${plugin_flags[@]}"

step "plugin killed (SIGKILL, with its children) in the middle of cryptsetup open; restarted, the stage converges"
luks_uuid=$(cryptsetup luksUUID "$image") || die "no LUKS header in $image"
for attempt in 1 2 3; do
  stage_killed_in 'cryptsetup open ' && break
  # The open was over before the killer saw it: try again.
  echo "attempt $attempt: the stage finished before the kill"
  node_unstage "$id"
  nothing_left
  [ "$attempt" -lt 3 ] || die "cryptsetup open never ran long enough to be killed"
done
restart_and_stage
[ "$(dmsetup ls | grep -c '^blockcsi-')" -eq 1 ] || die "not exactly one mapping: $(dmsetup ls 2>&1)"
[ "$(sessions_of "$iqn" | wc -l)" -eq 1 ] || die "not exactly one session to $iqn"
[ "$(cryptsetup luksUUID "$image")" = "$luks_uuid" ] || die "the LUKS header was made again"
[ "$(devnum_of "$(staging_of "$id")")" = "$(devnum_of "$mapping")" ] || die "the staging mount is not on $mapping"
cmp "$(staging_of "$id")/marker" "$work/marker" || die "the marker changed after the kill mid-open"
node_unstage "$id"
nothing_left

if [ "${1:-}" = fio ]; then
  step "fio: dm-crypt against the same LUN unencrypted (ratio only)"
  node_stage "$id"
  # The devices themselves, no filesystem on them (the volume is deleted
  # after: the plain writes overwrite its LUKS header).
  umount "$(staging_of "$id")" || die "umount the staging path for fio"
  fio_run() { # <device> <rw>: MiB/s
    fio --name=x --filename="$1" --rw="$2" --bs=1M --size=64M --direct=1 --ioengine=psync --numjobs=1 \
      --output-format=terse --terse-version=3 | awk -F';' -v rw="$2" '{print (rw ~ /read/ ? $7 : $48) / 1024}'
  }
  for round in 0 1 2 3; do
    crypt_w=$(fio_run "$mapping" write) plain_w=$(fio_run "/dev/$disk" write)
    crypt_r=$(fio_run "$mapping" read) plain_r=$(fio_run "/dev/$disk" read)
    [ "$round" = 0 ] && continue # warm-up
    echo "fio round $round: write crypt/plain = $crypt_w/$plain_w, read crypt/plain = $crypt_r/$plain_r"
  done
  node_unstage "$id"
fi

step "userspace connector (libiscsi bridge, FUSE, loop): LUKS2 on the loop device, the marker never in the image"
kill "$plugin_pid"
wait "$plugin_pid" 2>/dev/null || true
load_modules fuse loop
start_plugin "${plugin_flags[@]/#kernel/userspace}"
created=$(csi "${secret_args[@]}" CreateVolume "{\"name\":\"enc-us\",\"capacity_range\":{\"required_bytes\":67108864},\"volume_capabilities\":[$(capability_json ext4)],\"parameters\":{\"encrypted\":\"true\"}}") ||
  die "CreateVolume enc-us"
us=$(json_string "$created" volume_id) || die "no volume_id in $created"
vol_fs[$us]=ext4
vol_context[$us]=$(json_object "$created" volume_context)
controller_publish "$us"
# nothing_left_us: no loop device, bridge, dm device, mount or record.
nothing_left_us() {
  [ -z "$(losetup -a)" ] || die "a loop device is left: $(losetup -a)"
  ! pgrep -x blockcsi-bridge >/dev/null || die "a bridge is left: $(pgrep -a -x blockcsi-bridge)"
  ! compgen -G '/sys/block/dm-*' >/dev/null || die "a dm device is left: $(dmsetup ls 2>&1)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
  [ -z "$(attach_records)" ] || die "attach records left: $(attach_records)"
}
node_stage "$us"
us_mapping=/dev/mapper/$(dmsetup ls | awk '/^blockcsi-/ {print $1}')
[ -b "$us_mapping" ] || die "no mapping after the userspace stage: $(dmsetup ls 2>&1)"
us_loop=$(ls "/sys/dev/block/$(devnum_of "$us_mapping")/slaves")
[[ $us_loop == loop* ]] || die "$us_mapping is on $us_loop, not on the bridge's loop device"
[ "$(head -c 4 "/dev/$us_loop")" = LUKS ] || die "/dev/$us_loop carries no LUKS header"
[ "$(blockdev --getsize64 "$us_mapping")" -ge 67108864 ] || die "the userspace mapping is smaller than asked"
[ "$(devnum_of "$(staging_of "$us")")" = "$(devnum_of "$us_mapping")" ] || die "the staging mount is not on $us_mapping"
{ cp "$work/marker" "$(staging_of "$us")/marker" && sync -f "$(staging_of "$us")/marker"; } || die "write the marker (userspace)"
us_image="$work/pool/images/$us.img"
[ -f "$us_image" ] || die "no backing image $us_image"
! grep -qaF "$marker" "$us_image" || die "the marker is in the userspace volume's backing image in plain text"
node_unstage "$us"
nothing_left_us
node_stage "$us"
cmp "$(staging_of "$us")/marker" "$work/marker" || die "the marker changed across unstage/restage (userspace)"
node_unstage "$us"
nothing_left_us
controller_unpublish "$us"
delete_volume "$us"

controller_unpublish "$id"
delete_volume "$id"
for pid in "${watchers[@]}"; do
  kill "$pid" 2>/dev/null || die "a secret watcher stopped before the end: $(cat "$work"/watch-*.out)"
  wait "$pid" 2>/dev/null || true
done
! compgen -G "$work/leaks-*" >/dev/null || [ -z "$(cat "$work"/leaks-*)" ] || die "a key was in: $(sort -u "$work"/leaks-*)"
for file in "$work"/*.log "$work"/*.out; do
  ! grep -qF -f <(secrets_list) "$file" || die "a key is in $file"
done
! grep -rqF -f <(secrets_list) "$work/state" || die "a key is in the plugin's state"
step "done"
