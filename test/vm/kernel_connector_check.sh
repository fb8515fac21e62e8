#!/bin/bash
# Runs inside the test VM: `blockcsi --mode all --connector kernel` on a tgtd
# in the same VM, driven with csi-call, through iscsid + iscsiadm into the
# VM's own kernel. For ext4, xfs and raw block: create, publish, stage,
# publish, write; unpublish, unstage leaves no session, sd device or mount;
# stage again and the data is intact; then everything is taken down. ext4 and
# raw block use one-way CHAP, and the secret is on no process's command line
# (a watcher reads /proc/*/cmdline the whole time) and in no log.
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
wait_for 20 tgtadm -C "$control_port" --lld iscsi --op show --mode target || die "tgtd did not start"
mkdir -p "$work/pool" "$work/state" "$work/staging" "$work/pods"
start_plugin --mode all --backend local --pool "$work/pool" --tgt-control-port "$control_port" \
  --portal "$portal" --connector kernel --node-id "$node"

export CHAP_USER=vmnode-chap
CHAP_SECRET="chap-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export CHAP_SECRET
chap_secrets=(--secret-env chap-username=CHAP_USER --secret-env chap-password=CHAP_SECRET)

# The secret must never be in a command line while the volumes come and go
# (one grep per round: a fork is dear under TCG; the pattern comes on a pipe,
# not in grep's own argv).
watch_argv() {
  while :; do
    # No match is grep's exit 1: not an error here (set -e).
    grep -laF -f <(printf '%s\n' "$CHAP_SECRET") /proc/[0-9]*/cmdline 2>/dev/null >>"$work/argv-leaks" || true
    sleep 0.1
  done
}
watch_argv &
watcher_pid=$!
daemon_pids+=("$watcher_pid")
# The watcher must see a secret that is in an argv: one, for a second.
sh -c 'sleep 1' "$CHAP_SECRET"
wait_for 10 test -s "$work/argv-leaks" || die "the argv watcher did not see a command line with the secret"
: >"$work/argv-leaks"

# nothing_left <iqn>: no session, no sd disk, no mount of ours.
nothing_left() {
  [ -z "$(sessions_of "$1")" ] || die "a session to $1 is left"
  ! compgen -G '/sys/block/sd*' >/dev/null || die "an sd disk is left: $(echo /sys/block/sd*)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
}

# lifecycle <fs type: ext4, xfs or block> <chap: yes or no>
lifecycle() {
  local fs=$1 chap=$2 capability parameters='{}' secrets=() created volume_id volume_context context
  if [ "$fs" = block ]; then
    capability='{"block":{},"access_mode":{"mode":"SINGLE_NODE_WRITER"}}'
  else
    capability="{\"mount\":{\"fs_type\":\"$fs\"},\"access_mode\":{\"mode\":\"SINGLE_NODE_WRITER\"}}"
  fi
  if [ "$chap" = yes ]; then
    parameters='{"chap":"true"}'
    secrets=("${chap_secrets[@]}")
  fi
  step "$fs (CHAP $chap): CreateVolume, ControllerPublishVolume"
  # 320 MiB: mkfs.xfs refuses less than 300 MB.
  created=$(csi CreateVolume "{\"name\":\"kc-$fs\",\"capacity_range\":{\"required_bytes\":335544320},\"volume_capabilities\":[$capability],\"parameters\":$parameters}") ||
    die "CreateVolume $fs"
  volume_id=$(json_get "$created" 'd["volume"]["volume_id"]')
  volume_context=$(json_get "$created" 'd["volume"].get("volume_context", {})')
  local iqn="iqn.2026-11.io.blockcsi:$volume_id"
  context=$(csi "${secrets[@]}" ControllerPublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\",\"volume_capability\":$capability,\"readonly\":false}") ||
    die "ControllerPublishVolume $fs"
  context=$(json_get "$context" 'd["publish_context"]')
  local staging="$work/staging/$volume_id" target="$work/pods/$volume_id"
  stage_and_publish() {
    csi "${secrets[@]}" NodeStageVolume "{\"volume_id\":\"$volume_id\",\"publish_context\":$context,\"staging_target_path\":\"$staging\",\"volume_capability\":$capability,\"volume_context\":$volume_context}" >/dev/null ||
      die "NodeStageVolume $fs"
    csi NodePublishVolume "{\"volume_id\":\"$volume_id\",\"publish_context\":$context,\"staging_target_path\":\"$staging\",\"target_path\":\"$target\",\"volume_capability\":$capability,\"readonly\":false}" >/dev/null ||
      die "NodePublishVolume $fs"
    [ -n "$(sessions_of "$iqn")" ] || die "no kernel iSCSI session to $iqn after the stage"
  }
  unpublish_and_unstage() {
    csi NodeUnpublishVolume "{\"volume_id\":\"$volume_id\",\"target_path\":\"$target\"}" >/dev/null || die "NodeUnpublishVolume $fs"
    csi NodeUnstageVolume "{\"volume_id\":\"$volume_id\",\"staging_target_path\":\"$staging\"}" >/dev/null || die "NodeUnstageVolume $fs"
    nothing_left "$iqn"
  }

  step "$fs: NodeStageVolume, NodePublishVolume, write"
  stage_and_publish
  local session
  session=$(sessions_of "$iqn")
  [ "$(cat "/sys/class/iscsi_session/$session/initiatorname")" = "iqn.2026-11.io.blockcsi:node:$node" ] ||
    die "the session's initiator is $(cat "/sys/class/iscsi_session/$session/initiatorname"), not the node's"
  if [ "$chap" = yes ]; then
    [ "$(cat "/sys/class/iscsi_session/$session/username")" = "$CHAP_USER" ] || die "the session did not use CHAP"
  fi
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
  unpublish_and_unstage
  step "$fs: stage and publish again: the data is intact"
  stage_and_publish
  if [ "$fs" = block ]; then
    cmp <(dd if="$target" bs=1M count=1 iflag=direct status=none) "$work/data-$fs" || die "the raw data changed"
  else
    cmp "$target/data" "$work/data-$fs" || die "the file changed"
  fi
  unpublish_and_unstage
  step "$fs: ControllerUnpublishVolume, DeleteVolume"
  csi ControllerUnpublishVolume "{\"volume_id\":\"$volume_id\",\"node_id\":\"$node\"}" >/dev/null || die "ControllerUnpublishVolume $fs"
  csi DeleteVolume "{\"volume_id\":\"$volume_id\"}" >/dev/null || die "DeleteVolume $fs"
  ! tgtadm -C "$control_port" --lld iscsi --op show --mode target | grep -q "$volume_id" ||
    die "tgtd still has the target of $volume_id"
  [ -z "$(ls "$work/pool/images")" ] || die "images left in the pool: $(ls "$work/pool/images")"
}

lifecycle ext4 yes
lifecycle xfs no
lifecycle block yes

kill "$watcher_pid" 2>/dev/null || die "the argv watcher stopped before the end"
wait "$watcher_pid" 2>/dev/null || true
[ ! -s "$work/argv-leaks" ] || die "the CHAP secret was in the command line of $(sort -u "$work/argv-leaks")"
for log in "$work"/*.log; do
  ! grep -qF "$CHAP_SECRET" "$log" || die "the CHAP secret is in $log"
done
step "done"
