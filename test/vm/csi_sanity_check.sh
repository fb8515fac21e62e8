#!/bin/bash
# Runs inside the test VM (through test/vm/csi_sanity_run.sh, which unpacks
# the binary): csi-sanity v5.3.1, the CSI community's conformance suite,
# against `blockcsi --mode all --connector kernel` with the local backend on
# a tgtd in the VM, 64 MiB volumes, in mount mode and in block mode. Every
# node spec goes through iscsid and the VM's kernel. 0 failed specs, and
# every spec in the count it must be in (a spec drifting from passed to
# skipped fails too). The VM's root has CAP_SYS_RESOURCE, so the online grow
# of a mounted ext4 ("should work if node-expand is called after
# node-publish") runs: no spec is skipped by name. After each run nothing is
# left: no session, sd disk, mount, attach record, tgtd target or image.
# A third run, in mount mode, against an encrypted class: the parameter
# encrypted: "true" on every volume, and a throw-away key-encryption key as
# the provisioner and node-stage secrets (csi-sanity reads secrets only
# from a file: a 0600 file in the VM's RAM, gone with the VM); every staged
# volume is LUKS2 under dm-crypt, and no dm device is left after it.
# BLOCKCSI_SANITY_PASSES (default "mount block encrypted") picks the runs.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"

sanity="$BLOCKCSI_BUILD_DIR/peers/csi-sanity"
[ -x "$sanity" ] || die "$sanity is missing (test/vm/csi_sanity_run.sh unpacks it)"
grep -q '^CapEff:.*[13579bdf][0-9a-f]\{6\}$' /proc/self/status ||
  die "this root lacks CAP_SYS_RESOURCE: $(grep CapEff /proc/self/status)"

node=vmnode
portal=127.0.0.1:3260
control_port=4246
start_iscsid "iqn.2000-01.invalid:not-the-node"
start_tgtd "$control_port" "$portal"

nothing_left() {
  ! compgen -G '/sys/class/iscsi_session/session*' >/dev/null || die "iSCSI sessions are left: $(ls /sys/class/iscsi_session)"
  ! compgen -G '/sys/block/sd*' >/dev/null || die "an sd disk is left: $(echo /sys/block/sd*)"
  ! compgen -G '/sys/block/dm-*' >/dev/null || die "a dm device is left: $(dmsetup ls 2>&1)"
  ! grep -q " $work/" /proc/self/mountinfo || die "a mount is left: $(grep " $work/" /proc/self/mountinfo)"
  [ -z "$(attach_records)" ] || die "attach records left: $(attach_records)"
  [ -z "$(tgtadm -C "$control_port" --lld iscsi --op show --mode target)" ] ||
    die "tgtd targets are left: $(tgtadm -C "$control_port" --lld iscsi --op show --mode target | grep ^Target)"
  [ -z "$(find "$work/pool" -type f -name '*.img')" ] || die "images are left: $(find "$work/pool" -type f -name '*.img')"
}

# run_sanity <mount|block|encrypted> <passed> <pending> <skipped>
run_sanity() {
  local mode=$1 log="$work/csi-sanity-$1.out" code summary
  case " ${BLOCKCSI_SANITY_PASSES:-mount block encrypted} " in
  *" $mode "*) ;;
  *)
    echo "csi-sanity $mode: not asked for (BLOCKCSI_SANITY_PASSES)"
    return 0
    ;;
  esac
  step "csi-sanity, $mode mode"
  rm -rf "$work/state" "$work/pool"
  mkdir -p "$work/state" "$work/pool"
  # The pool lives in the VM's RAM (a tmpfs of half of it); csi-sanity's
  # 1 GiB volumes and grows are sparse and written little: overcommit it.
  start_plugin --mode all --backend local --pool "$work/pool" --overcommit-ratio 20 \
    --tgt-control-port "$control_port" --portal "$portal" --connector kernel --node-id "$node"
  local args=(-csi.endpoint "$work/csi.sock" -csi.stagingdir "$work/sanity-staging-$mode"
    -csi.mountdir "$work/sanity-mount-$mode" -csi.testvolumesize 67108864 -ginkgo.no-color)
  [ "$mode" = block ] && args+=(-csi.testvolumeaccesstype block)
  if [ "$mode" = encrypted ]; then
    load_modules dm_crypt
    kek=$(head -c 32 /dev/urandom | base64)
    (
      umask 077
      for kind in CreateVolumeSecret NodeStageVolumeSecret; do printf '%s:\n  encryptionKey: %s\n' "$kind" "$kek"; done
    ) >"$work/sanity-secrets.yaml"
    printf 'encrypted: "true"\n' >"$work/sanity-parameters.yaml"
    args+=(-csi.secrets "$work/sanity-secrets.yaml" -csi.testvolumeparameters "$work/sanity-parameters.yaml")
  fi
  # GOMAXPROCS=1: csi-sanity v5.3.1's first connection can miss READY on a
  # busy machine otherwise (see test/conformance/csi_sanity_test.cc).
  set +e
  GOMAXPROCS=1 "$sanity" "${args[@]}" >"$log" 2>&1
  code=$?
  set -e
  summary=$(grep -Eo '[0-9]+ Passed \| [0-9]+ Failed \| [0-9]+ Pending \| [0-9]+ Skipped' "$log" | tail -n 1)
  echo "csi-sanity $mode: $summary (exit $code)"
  if [ "$code" -ne 0 ] || [ "$summary" != "$2 Passed | 0 Failed | $3 Pending | $4 Skipped" ]; then
    grep -E '^\s*\[FAIL\]|\[FAILED\]' "$log" | head -n 40 >&2 || true
    tail -n 60 "$log" >&2
    die "csi-sanity $mode: wanted $2 passed, 0 failed, $3 pending, $4 skipped"
  fi
  stop_plugin
  nothing_left
  if [ "$mode" = encrypted ]; then
    local opened
    opened=$(grep -c 'opened dm-crypt mapping' "$work/plugin.log" || true)
    echo "csi-sanity encrypted: $opened dm-crypt mappings opened"
    [ "$opened" -gt 0 ] || die "the encrypted run opened no dm-crypt mapping"
    ! grep -qF "$kek" "$work/plugin.log" || die "the key-encryption key is in the plugin's log"
    ! grep -rqF "$kek" "$work/state" || die "the key-encryption key is in the plugin's state"
  fi
}

# The plugin goes between the runs (each has a fresh state dir); tgtd and iscsid stay.
stop_plugin() {
  kill "$plugin_pid" 2>/dev/null || true
  wait "$plugin_pid" 2>/dev/null || true
}

run_sanity mount 76 1 15
run_sanity block 76 1 15
run_sanity encrypted 76 1 15
step "done"
