#!/bin/bash
# The bridge alone under fio: tgtd (control port 17017, portal 127.0.0.1:32617)
# with a 256 MiB file LUN, one blockcsi-bridge (its FUSE file and loop device)
# and fio (libaio, direct) on the loop device: 4 KiB random read and write at
# iodepth 1, 4, 16, 32 and 1 MiB sequential at iodepth 4; then the bridge's
# memory (smaps_rollup) and thread count. Issue #17 item 4; root, tgtd, fio.
#   hack/bridge_fio_qd.sh [BRIDGE_BINARY (build/bin/blockcsi-bridge)] [SECONDS per job (5)]
set -u
BR=${1:-build/bin/blockcsi-bridge}; SECS=${2:-5}; D=${BRIDGE_FIO_DIR:-/tmp/blockcsi-bridge-fio}; CP=17017; PORT=32617
IQN=iqn.2026-12.io.blockcsi.bridgefio:data; INI=iqn.2026-12.io.blockcsi.bridgefio:init
rm -rf $D/mnt $D/ctl.sock; mkdir -p $D
[ -f $D/lun.img ] || dd if=/dev/urandom of=$D/lun.img bs=1M count=256 status=none
/usr/sbin/tgtd -f -C $CP --iscsi portal=127.0.0.1:$PORT > $D/tgtd.log 2>&1 &
TGTD=$!
for i in $(seq 50); do tgtadm -C $CP --op show --mode target >/dev/null 2>&1 && break; sleep 0.1; done
tgtadm -C $CP --op new --mode target --tid 1 -T $IQN
tgtadm -C $CP --op new --mode logicalunit --tid 1 --lun 1 -b $D/lun.img
tgtadm -C $CP --op bind --mode target --tid 1 --initiator-name $INI
$BR --volume-id fio --control-socket $D/ctl.sock --mountpoint $D/mnt --portal 127.0.0.1:$PORT --target $IQN --lun 1 --initiator $INI > $D/ready.txt 2>$D/bridge.log &
BRPID=$!
for i in $(seq 100); do [ -s $D/ready.txt ] && break; sleep 0.1; done
DEV=$(python3 -c "import json;print(json.load(open('$D/ready.txt'))['device'])")
echo "device $DEV dio=$(cat /sys/block/$(basename $DEV)/loop/dio)"
for rw in randread randwrite; do
  for qd in 1 4 16 32; do
    r=$(fio --name=j --filename=$DEV --rw=$rw --bs=4k --iodepth=$qd --ioengine=libaio --direct=1 --runtime=$SECS --time_based --output-format=json 2>/dev/null | python3 -c "import json,sys;j=json.load(sys.stdin)['jobs'][0];k='read' if 'read' in '$rw' else 'write';print(int(j[k]['iops']))")
    echo "$rw qd$qd $r IOPS"
  done
done
for rw in read write; do
  r=$(fio --name=j --filename=$DEV --rw=$rw --bs=1M --iodepth=4 --ioengine=libaio --direct=1 --runtime=$SECS --time_based --output-format=json 2>/dev/null | python3 -c "import json,sys;j=json.load(sys.stdin)['jobs'][0];k='$rw';print(int(j[k]['bw']/1024))")
  echo "seq $rw 1M qd4 $r MiB/s"
done
grep -E "^(Private|Pss|Rss)" /proc/$BRPID/smaps_rollup | tr -s ' ' | tr '\n' ' '; echo; ls /proc/$BRPID/task | wc -l | sed 's/^/threads /'
echo '{"op":"shutdown"}' | python3 -c "
import socket,sys
s=socket.socket(socket.AF_UNIX);s.connect('$D/ctl.sock');s.sendall(sys.stdin.read().encode());print(s.recv(4096).decode()[:100])"
wait $BRPID
kill -9 $TGTD; wait $TGTD 2>/dev/null; sleep 0.3
