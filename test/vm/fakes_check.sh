#!/bin/bash
# Runs inside the test VM: the captured iscsiadm output (test/testdata/iscsiadm)
# and the fake sysfs trees (test/testdata/sysfs) the unit tests replay are
# compared with what the real open-iscsi and kernel show for the same
# situations, made for real: the session the kernel connector makes, another
# LUN on it, a second session through another portal,
# a path where another LUN answers, and a login through the iface of a
# static volume's initiator name (the multipath map's fake is compared where
# multipathd assembles one: multipath_check.sh). A difference fails: a fake
# that drifted from the kernel would let the unit tests pass on a lie.
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=test/vm/lib.sh
source "$here/lib.sh"
data="${BLOCKCSI_SOURCE_DIR:-$here/../..}/test/testdata"

iqn=iqn.2026-11.io.blockcsi:vol-7f3a9c2e
portal=127.0.0.1:3260
# The captures' second portal, 192.0.2.11, is this one.
portal2=127.0.0.2:3260
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
  sed -i 's/127\.0\.0\.1/192.0.2.10/g; s/127\.0\.0\.2/192.0.2.11/g' "$out"
  if [ "$got" -ne "$code" ] || ! diff -u "$data/iscsiadm/$file" "$out"; then
    echo "DIFFERS: iscsiadm/$file (exit $got, the capture's is $code): $*"
    err=$(cat "$work/err")
    [ -z "$err" ] || echo "  stderr: $err"
    differences=$((differences + 1))
  else
    echo "same:    iscsiadm/$file"
  fi
}

# same_file <capture> <file> <what>: a file made here (the portals written as
# the captures write them) is the captured text.
same_file() {
  if diff -u "$data/iscsiadm/$1" "$2"; then
    echo "same:    iscsiadm/$1"
  else
    echo "DIFFERS: iscsiadm/$1: $3"
    differences=$((differences + 1))
  fi
}

step "iscsiadm as the kernel connector runs it"
same iface_show_missing.stderr 6 iscsiadm -m iface -I blockcsi -o show
same iface_new.txt 0 iscsiadm -m iface -I blockcsi -o new
same iface_show_blockcsi_no_initiator.txt 0 iscsiadm -m iface -I blockcsi -o show
same iface_update.txt 0 iscsiadm -m iface -I blockcsi -o update -n iface.initiatorname -v iqn.2026-11.io.blockcsi:node:worker-1
same iface_show_blockcsi.txt 0 iscsiadm -m iface -I blockcsi -o show
same node_new_portal1.txt 0 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o new
# The record file that creation wrote, the target's name written as the
# capture writes it.
record="/etc/iscsi/nodes/$iqn/${portal/:/,}"
[ -f "$record" ] || die "no flat node record $record after -o new"
sed "s/$iqn/TARGET/; s/127\.0\.0\.1/192.0.2.10/g" "$record" >"$work/record"
same_file node_record_new_portal1.txt "$work/record" "$record"
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o update -n node.session.scan -v manual >/dev/null
same login_portal1.txt 0 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login
same login_session_exists.stderr 15 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login

# compare <scenario> <fake host> <fake session> <real session> <name=name...>:
# test/testdata/sysfs/<scenario> against /, the fake's host, session,
# connection and target numbers mapped to the real session's, and the other
# names (LUNs, disks, portals) as given.
compare() {
  local scenario=$1 fh=$2 fs=$3 session=$4 host h s
  shift 4
  host=$(basename "$(readlink -f "/sys/class/iscsi_session/$session/device/..")")
  h=${host#host} s=${session#session}
  if python3 "$here/compare_fake_sysfs.py" "$data/sysfs/$scenario" / "host$fh=$host" "session$fs=$session" \
    "connection$fs:0=connection$s:0" "target$fh:0:0=target$h:0:0" "$@"; then
    echo "same:    sysfs/$scenario"
  else
    echo "DIFFERS: sysfs/$scenario"
    differences=$((differences + 1))
  fi
}
# scan_lun <session> <lun>: the LUN scanned as the connector scans it (its
# own host, that LUN only); prints its disk once /sys/block has it.
scan_lun() {
  local host disk
  host=$(basename "$(readlink -f "/sys/class/iscsi_session/$1/device/..")")
  echo "- - $2" >"/sys/class/scsi_host/$host/scan"
  wait_for "$vm_patience_s" sh -c "ls /sys/class/iscsi_session/$1/device/target*/*:$2/block/* >/dev/null 2>&1" ||
    die "LUN $2 did not appear on $1"
  disk=$(basename /sys/class/iscsi_session/"$1"/device/target*/*:"$2"/block/*)
  wait_for "$vm_patience_s" test -e "/sys/block/$disk" || die "/sys/block/$disk did not appear"
  echo "$disk"
}
# scsi_of <session> <lun>: the real H:0:0:L of that LUN.
scsi_of() { basename /sys/class/iscsi_session/"$1"/device/target*/*:"$2"; }

step "sysfs of the session against test/testdata/sysfs/session1_lun1"
session=$(sessions_of "$iqn")
[ -n "$session" ] || die "no session"
disk=$(scan_lun "$session" 1)
echo "real session: $session, LUN 1 -> $disk"
compare session1_lun1 3 1 "$session" "3:0:0:1=$(scsi_of "$session" 1)" sdc="$disk" 192.0.2.10=127.0.0.1

step "another volume's LUN 2 on the same session against session1_lun2"
truncate -s 2G "$work/lun2.img"
tgtadm -C "$control_port" --lld iscsi --op new --mode logicalunit --tid 3 --lun 2 -b "$work/lun2.img" || die "tgtadm new lun 2"
tgtadm -C "$control_port" --lld iscsi --op update --mode logicalunit --tid 3 --lun 2 \
  --params scsi_sn=bc11112222333344,scsi_id=vol-11112222 || die "tgtadm lun 2 params"
disk2=$(scan_lun "$session" 2)
compare session1_lun2 3 1 "$session" "3:0:0:2=$(scsi_of "$session" 2)" sde="$disk2" 192.0.2.10=127.0.0.1
echo 1 >"/sys/block/$disk2/device/delete"
wait_for "$vm_patience_s" test ! -e "/sys/block/$disk2" || die "$disk2 stayed"

step "a login to $portal2 while nothing listens there"
# One short try (the connector's own record keeps open-iscsi's defaults): the
# answer is the same, it only comes sooner.
iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi -o new >/dev/null || die "node new $portal2"
for setting in node.session.initial_login_retry_max=1 node.conn[0].timeo.login_timeout=3; do
  iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi -o update -n "${setting%%=*}" -v "${setting#*=}" >/dev/null ||
    die "node update $setting"
done
same login_timeout_portal2.stderr 8 iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi --login
iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi -o delete >/dev/null || die "node delete $portal2"

step "a second session through $portal2 against session2_lun1"
tgtadm -C "$control_port" --lld iscsi --op new --mode portal --param "portal=$portal2" || die "tgtd portal $portal2"
same node_new_portal2.txt 0 iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi -o new
iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi -o update -n node.session.scan -v manual >/dev/null
same login_portal2.txt 0 iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi --login
session2=$(sessions_of "$iqn" | grep -vx "$session")
[ -n "$session2" ] || die "no second session"
disk_b=$(scan_lun "$session2" 1)
echo "real session: $session2, LUN 1 -> $disk_b"
compare session2_lun1 4 2 "$session2" "4:0:0:1=$(scsi_of "$session2" 1)" sdd="$disk_b" 192.0.2.11=127.0.0.2
iscsiadm -m session | sed 's/127\.0\.0\.1/192.0.2.10/g; s/127\.0\.0\.2/192.0.2.11/g' >"$work/sessions"
same_file session_list_two.txt "$work/sessions" "iscsiadm -m session"

step "another LUN answers on the second path against session2_lun1_other_lun"
# LUN 1 takes another volume's identity; the second path's disk re-reads its
# VPD pages on a rescan, as the kernel does when a LUN is re-mapped.
tgtadm -C "$control_port" --lld iscsi --op update --mode logicalunit --tid 3 --lun 1 \
  --params scsi_sn=bc11112222333344,scsi_id=vol-11112222 || die "tgtadm lun 1 other identity"
echo 1 >"/sys/block/$disk_b/device/rescan"
compare session2_lun1_other_lun 4 2 "$session2" "4:0:0:1=$(scsi_of "$session2" 1)" sdd="$disk_b" 192.0.2.11=127.0.0.2
tgtadm -C "$control_port" --lld iscsi --op update --mode logicalunit --tid 3 --lun 1 \
  --params scsi_sn=bc7f3a9c2e41d08b,scsi_id=vol-7f3a9c2e || die "tgtadm lun 1 identity back"
same logout_portal2.txt 0 iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi --logout
iscsiadm -m node -T "$iqn" -p "$portal2" -I blockcsi -o delete >/dev/null || die "node delete"

step "logout"
same logout_portal1.txt 0 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --logout
same logout_no_session.stderr 21 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --logout
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o delete >/dev/null || die "node delete"
same node_delete_no_record.stderr 21 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o delete

step "a static volume's initiator name through an iface of its own against session1_lun1_legacy_initiator"
legacy=iqn.1994-05.com.example:legacy
legacy_iface=blockcsi-40f33eb6b30053a4
tgtadm -C "$control_port" --lld iscsi --op bind --mode target --tid 3 --initiator-name "$legacy" || die "tgtadm bind"
same iface_show_missing_legacy.stderr 6 iscsiadm -m iface -I "$legacy_iface" -o show
same iface_new_legacy.txt 0 iscsiadm -m iface -I "$legacy_iface" -o new
same iface_update_legacy.txt 0 iscsiadm -m iface -I "$legacy_iface" -o update -n iface.initiatorname -v "$legacy"
same iface_show_legacy.txt 0 iscsiadm -m iface -I "$legacy_iface" -o show
iscsiadm -m node -T "$iqn" -p "$portal" -I "$legacy_iface" -o new >/dev/null || die "node new"
iscsiadm -m node -T "$iqn" -p "$portal" -I "$legacy_iface" -o update -n node.session.scan -v manual >/dev/null
iscsiadm -m node -T "$iqn" -p "$portal" -I "$legacy_iface" --login >/dev/null || die "login as $legacy"
session=$(sessions_of "$iqn")
disk=$(scan_lun "$session" 1)
compare session1_lun1_legacy_initiator 3 1 "$session" "3:0:0:1=$(scsi_of "$session" 1)" sdc="$disk" 192.0.2.10=127.0.0.1
iscsiadm -m node -T "$iqn" -p "$portal" -I "$legacy_iface" --logout >/dev/null || die "logout"
iscsiadm -m node -T "$iqn" -p "$portal" -I "$legacy_iface" -o delete >/dev/null || die "node delete"
tgtadm -C "$control_port" --lld iscsi --op unbind --mode target --tid 3 --initiator-name "$legacy" || die "tgtadm unbind"

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
# What the refused login printed on stdout.
sed 's/127\.0\.0\.1/192.0.2.10/g' "$work/out" >"$work/refused.stdout"
same_file login_failed.stdout "$work/refused.stdout" "the refused login's stdout"
# The initiator refuses the target's answer to mutual CHAP.
node_auth fake-in-secret wrong-out-secret
same login_fatal.stderr 19 iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi --login
[ -z "$(sessions_of "$iqn")" ] || die "a refused login left a session"
iscsiadm -m node -T "$iqn" -p "$portal" -I blockcsi -o delete >/dev/null || die "node delete"

[ "$differences" -eq 0 ] || die "$differences captures or fakes differ from the real kernel and open-iscsi"
step "done: every capture and fake tree matches"
