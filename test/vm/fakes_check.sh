#!/bin/bash
# Runs inside the test VM: the captured iscsiadm output (test/testdata/iscsiadm)
# and the fake sysfs tree (test/testdata/sysfs/session1_lun1) the unit tests
# replay are compared with what the real open-iscsi and kernel show for the
# same session: the same target, LUN, serial and initiator, reached the way
# the kernel connector reaches it. A difference fails: a fake that drifted
# from the kernel would let the unit tests pass on a lie.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"
data="${BLOCKCSI_SOURCE_DIR:-$here/../..}/test/testdata"

iqn=iqn.2026-11.io.blockcsi:vol-7f3a9c2e
portal=127.0.0.1:3260
control_port=4243
differences=0
start_iscsid "iqn.2000-01.invalid:not-the-node"

step "tgtd with the LUN the fakes were captured from"
tgtd -f -C "$control_port" --iscsi "portal=$portal" >"$work/tgtd.log" 2>&1 &
daemon_pids+=($!)
wait_for "$vm_patience_s" tgtadm -C "$control_port" --lld iscsi --op show --mode target || die "tgtd did not start"
truncate -s 1G "$work/lun1.img"
tgtadm -C "$control_port" --lld iscsi --op new --mode target --tid 3 -T "$iqn" || die "tgtadm new target"
tgtadm -C "$control_port" --lld iscsi --op new --mode logicalunit --tid 3 --lun 1 -b "$work/lun1.img" || die "tgtadm new lun"
tgtadm -C "$control_port" --lld iscsi --op update --mode logicalunit --tid 3 --lun 1 \
  --params scsi_sn=bc7f3a9c2e41d08b,scsi_id=vol-7f3a9c2e || die "tgtadm lun params"
tgtadm -C "$control_port" --lld iscsi --op bind --mode target --tid 3 \
  --initiator-name iqn.2026-11.io.blockcsi:node:worker-1 || die "tgtadm bind"

# same <testdata file> <expected exit code> <command...>: the command's stdout
# (for .txt/.stdout) or stderr (.stderr), with the portal written as the
# captures write it, is the captured text, and its exit code the expected one.
same() {
  local file=$1 code=$2 got out err
  shift 2
  set +e
  "$@" >"$work/out" 2>"$work/err"
  got=$?
  set -e
  case "$file" in
  *.stderr) out="$work/err" ;;
  *) out="$work/out" ;;
  esac
  sed -i 's/127\.0\.0\.1/192.0.2.10/g' "$out"
  if [ "$got" -ne "$code" ] || ! diff -u "$data/iscsiadm/$file" "$out"; then
    echo "DIFFERS: iscsiadm/$file (exit $got, the capture's is $code): $*"
    err=$(cat "$work/err")
    [ -z "$err" ] || echo "  stderr: $err"
    differences=$((differences + 1))
  else
    echo "same:    iscsiadm/$file"
  fi
}

step "iscsiadm as the kernel connector runs it"
same iface_show_missing.stderr 6 iscsiadm -m iface -I blockcsi -o show
same iface_new.txt 0 iscsiadm -m iface -I blockcsi -o new
same iface_update.txt 0 iscsiadm -m iface -I blockcsi -o update -n iface.initiatorname -v iqn.2026-11.io.blockcsi:node:worker-1
same iface_show_blockcsi.txt 0 iscsiadm -m iface -I blockcsi -o show
same node_new_portal1.txt 0 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o new
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o update -n node.session.scan -v manual >/dev/null
same login_portal1.txt 0 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login
same login_session_exists.stderr 15 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login

step "sysfs of the session against test/testdata/sysfs/session1_lun1"
session=$(sessions_of "$iqn")
[ -n "$session" ] || die "no session"
host=$(basename "$(readlink -f "/sys/class/iscsi_session/$session/device/..")")
echo "- - 1" >"/sys/class/scsi_host/$host/scan"
wait_for "$vm_patience_s" sh -c "ls /sys/class/iscsi_session/$session/device/target*/*/block/* >/dev/null 2>&1" || die "LUN 1 did not appear"
disk=$(disk_of "$session")
wait_for "$vm_patience_s" test -e "/sys/block/$disk" || die "/sys/block/$disk did not appear"
h=${host#host}
s=${session#session}
echo "real session: $session on $host, LUN 1 -> $disk"
if ! python3 "$here/compare_fake_sysfs.py" "$data/sysfs/session1_lun1" / \
  host3="$host" session1="$session" "connection1:0=connection$s:0" "target3:0:0=target$h:0:0" \
  "3:0:0:1=$h:0:0:1" sdc="$disk" 192.0.2.10=127.0.0.1; then
  differences=$((differences + 1))
fi
# One session: the first line of the two-session capture.
iscsiadm -m session | sed 's/127\.0\.0\.1/192.0.2.10/g' >"$work/sessions"
if head -n 1 "$data/iscsiadm/session_list_two.txt" | diff -u - "$work/sessions"; then
  echo "same:    iscsiadm/session_list_two.txt (its first session)"
else
  echo "DIFFERS: iscsiadm/session_list_two.txt: iscsiadm -m session"
  differences=$((differences + 1))
fi

step "logout"
same logout_portal1.txt 0 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --logout
same logout_no_session.stderr 21 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --logout
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o delete >/dev/null || die "node delete"
same node_delete_no_record.stderr 21 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o delete

step "logins CHAP refuses"
# The test's own throw-away secrets: on argv here, never in the plugin.
tgtadm -C "$control_port" --lld iscsi --op new --mode account --user fake-in --password fake-in-secret || die "account"
tgtadm -C "$control_port" --lld iscsi --op new --mode account --user fake-out --password fake-out-secret || die "account"
tgtadm -C "$control_port" --lld iscsi --op bind --mode account --tid 3 --user fake-in || die "bind"
tgtadm -C "$control_port" --lld iscsi --op bind --mode account --tid 3 --user fake-out --outgoing || die "bind outgoing"
node_auth() { # <password> <mutual password>
  local key value
  for setting in authmethod=CHAP username=fake-in "password=$1" username_in=fake-out "password_in=$2"; do
    key=${setting%%=*} value=${setting#*=}
    iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o update -n "node.session.auth.$key" -v "$value" >/dev/null ||
      die "node auth $key"
  done
}
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o new >/dev/null || die "node new"
# The target refuses the initiator's secret.
node_auth wrong-in-secret fake-out-secret
same login_auth_failed.stderr 24 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login
# The initiator refuses the target's answer to mutual CHAP.
node_auth fake-in-secret wrong-out-secret
same login_fatal.stderr 19 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login
[ -z "$(sessions_of "$iqn")" ] || die "a refused login left a session"
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o delete >/dev/null || die "node delete"

[ "$differences" -eq 0 ] || die "$differences captures or fakes differ from the real kernel and open-iscsi"
step "done: every capture and the fake tree match"
