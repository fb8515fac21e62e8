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
#   mapping and logs out. The key Secret and the data key are in no
#   process's argv or environment (csi-call, playing the kubelet, holds the
#   Secret in its environment) the whole time, in no log and in no record.
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

step "stage: the blank LUN becomes LUKS2, ext4 is made on the mapping"
node_stage "$id"
node_publish "$id"
mapping=/dev/mapper/$(dmsetup ls | awk '/^blockcsi-/ {print $1}')
[ -b "$mapping" ] || die "no mapping after the stage: $(dmsetup ls 2>&1)"
disk=$(disk_of "$(sessions_of "$iqn")")
cryptsetup status "$(basename "$mapping")" | grep -q "type: *LUKS2" || die "$mapping is not LUKS2"
[ "$(ls "/sys/dev/block/$(devnum_of "$mapping")/slaves")" = "$disk" ] || die "$mapping is not on $disk"
[ "$(devnum_of "$(staging_of "$id")")" = "$(devnum_of "$mapping")" ] || die "the staging mount is not on $mapping"
[ "$(head -c 4 "/dev/$disk")" = LUKS ] || die "/dev/$disk carries no LUKS header"
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
