#!/bin/bash
# Runs inside the test VM: `blockcsi --connector kernel` killed with SIGKILL
# in the middle of a NodeStageVolume, on a tgtd in the same VM, converges
# when it is started again and the call is retried (as kubelet does):
#   - mid-login: the plugin dies while `iscsiadm --login` runs (the child
#     lives on and finishes the login the restarted plugin then finds);
#   - mid-mkfs: the plugin and everything it runs die while mkfs.ext4 writes
#     (as a container runtime takes a container down), leaving a half-made
#     filesystem on a volume that was blank.
# Each time the retried stage succeeds with exactly one session, the
# filesystem takes a file, survives unstage/restage, and the unstage leaves
# no session, sd disk, mount, attach record or node record.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

node=vmnode
portal=127.0.0.1:3260
control_port=4245
start_iscsid "iqn.2000-01.invalid:not-the-node"
step "start tgtd and blockcsi --connector kernel"
start_tgtd "$control_port" "$portal"
mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pods"
plugin_flags=(--mode all --backend local --pool "$work/pool" --tgt-control-port "$control_port"
  --portal "$portal" --connector kernel --node-id "$node")
start_plugin "${plugin_flags[@]}"

nothing_left() { # <iqn>
  [ -z "$(sessions_of "$1")" ] || die "a session to $1 is left"
  ! compgen -G '/sys/block/sd*' >/dev/null || die "an sd disk is left: $(echo /sys/block/sd*)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
  [ -z "$(attach_records)" ] || die "attach records left: $(attach_records)"
  [ ! -e "/etc/iscsi/nodes/$1" ] || [ -z "$(ls "/etc/iscsi/nodes/$1")" ] || die "a node record of $1 is left"
}

# crash_and_converge <name> <fs> <regex of the child to die in> [--tree]
crash_and_converge() {
  local name=$1 fs=$2 pattern=$3 tree=${4:-} id iqn staging attempt sessions
  step "$name: NodeStageVolume, killed while it runs /$pattern/"
  create_volume "rc-$name" "$fs" 335544320
  id=$volume_id
  iqn="iqn.2026-11.io.blockcsi:$id"
  staging=$(staging_of "$id")
  controller_publish "$id"
  python3 "$here/kill_when.py" "$plugin_pid" "$pattern" ${tree:+"$tree"} >"$work/kill.out" 2>&1 &
  local killer=$!
  # Give the killer its first look at /proc before the call starts.
  sleep 0.5
  if csi NodeStageVolume "$(stage_request "$id")" >/dev/null 2>"$work/call.err"; then
    wait "$killer" 2>/dev/null || true
    die "NodeStageVolume finished before the kill: $(cat "$work/kill.out")"
  fi
  wait "$killer" || die "the plugin was not killed: $(cat "$work/kill.out")"
  echo "$(cat "$work/kill.out"); the call said: $(cat "$work/call.err")"
  wait "$plugin_pid" 2>/dev/null || true

  step "$name: restart the plugin, retry NodeStageVolume until it succeeds"
  start_plugin "${plugin_flags[@]}"
  for attempt in 1 2 3 4 5; do
    if csi NodeStageVolume "$(stage_request "$id")" >/dev/null 2>"$work/call.err"; then
      break
    fi
    echo "retry $attempt: $(cat "$work/call.err")"
    [ "$attempt" -lt 5 ] || die "NodeStageVolume did not converge after the kill"
    sleep 2
  done
  # What the restarted plugin found and did (for the record).
  grep -E 'attach record found|already logged in|formatting|e2fsck' "$work/plugin.log" | tail -n 4 | cut -c1-220
  sessions=$(sessions_of "$iqn" | wc -l)
  [ "$sessions" -eq 1 ] || die "$sessions sessions to $iqn after the retried stage"
  grep -q " $staging .* - $fs " /proc/self/mountinfo || die "$staging is not an $fs mount"
  [ "$(attach_records | wc -l)" -eq 1 ] || die "not exactly one attach record: $(attach_records)"
  head -c 1048576 /dev/urandom >"$work/data"
  { cp "$work/data" "$staging/data" && sync -f "$staging/data"; } || die "write after the converged stage"
  node_unstage "$id"
  nothing_left "$iqn"
  step "$name: stage again: the filesystem is sound and the data intact"
  node_stage "$id"
  cmp "$staging/data" "$work/data" || die "the file changed"
  node_unstage "$id"
  nothing_left "$iqn"
  # The filesystem in the pool's image checks clean (read-only check).
  e2fsck -fn "$work/pool/images/$id.img" >"$work/fsck.out" 2>&1 || die "e2fsck: $(cat "$work/fsck.out")"
  controller_unpublish "$id"
  delete_volume "$id"
}

crash_and_converge login ext4 'iscsiadm .*--login'
crash_and_converge mkfs ext4 '^mkfs\.ext4 ' --tree
step "done"
