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

step "create and publish a volume; wrap its data key under the class's key"
create_volume enc ext4 134217728
id=$volume_id
iqn="iqn.2026-11.io.blockcsi:$id"
controller_publish "$id"
# The controller's part (CreateVolume with encrypted: "true") is played
# here: a random data key wrapped as src/contract/volume_key.h says
# (AES-256-GCM under the KEK, the volume id as associated data), computed
# independently of our code. Keys go to Python on stdin, before the watcher
# starts: nothing below ever holds one in an argv.
KEK=$(head -c 32 /dev/urandom | base64)
OTHER_KEK=$(head -c 32 /dev/urandom | base64)
wrap() { # stdin: "<kek b64> <data key hex>"; argv: the volume id
  python3 -c 'import base64, os, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
kek, key = sys.stdin.read().split()
nonce = os.urandom(12)
sealed = AESGCM(base64.b64decode(kek)).encrypt(nonce, bytes.fromhex(key), sys.argv[1].encode())
print("v1." + base64.b64encode(nonce + sealed).decode())' "$1"
}
DATA_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
OTHER_DATA_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
wrapped=$(wrap "$id" <<<"$KEK $DATA_KEY") || die "wrap the data key"
wrapped_other=$(wrap "$id" <<<"$KEK $OTHER_DATA_KEY") || die "wrap another data key"
data_key_b64=$(python3 -c 'import base64, sys; print(base64.b64encode(bytes.fromhex(sys.stdin.read().strip())).decode())' <<<"$DATA_KEY")
vol_context[$id]='{"encryption":"luks2"}'
published=${vol_publish[$id]}
vol_publish[$id]="${published%\}},\"wrappedDataKey\":\"$wrapped\"}"
secret_args=(--secret-env encryptionKey=KEK)
csi() { KEK=$KEK OTHER_KEK=$OTHER_KEK "${csi_call[@]}" "$@"; }
secrets_list() { printf '%s\n' "$KEK" "$OTHER_KEK" "$DATA_KEY" "$OTHER_DATA_KEY" "$data_key_b64"; }

python3 "$here/secret_watch.py" "$work/secret-leaks" --allow-environ csi-call < <(secrets_list) >"$work/watch.out" 2>&1 &
watcher_pid=$!
daemon_pids+=("$watcher_pid")
wait_for "$vm_patience_s" grep -qx watching "$work/watch.out" || die "the secret watcher did not start: $(cat "$work/watch.out")"

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
vol_publish[$id]="${published%\}},\"wrappedDataKey\":\"$wrapped_other\"}"
csi_fails PERMISSION_DENIED "${secret_args[@]}" NodeStageVolume "$(stage_request "$id")"
nothing_left
[ "$(header_sum)" = "$before" ] || die "the refused stage changed the LUKS header"
vol_publish[$id]="${published%\}},\"wrappedDataKey\":\"$wrapped\"}"

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
kill "$watcher_pid" 2>/dev/null || die "the secret watcher stopped before the end: $(cat "$work/watch.out")"
wait "$watcher_pid" 2>/dev/null || true
[ ! -s "$work/secret-leaks" ] || die "a key was in: $(sort -u "$work/secret-leaks")"
for file in "$work"/*.log "$work"/*.out; do
  ! grep -qF -f <(secrets_list) "$file" || die "a key is in $file"
done
! grep -rqF -f <(secrets_list) "$work/state" || die "a key is in the plugin's state"
step "done"
