#!/bin/busybox sh
# shellcheck shell=dash
# /init of the test VM's initramfs (built by hack/vm-kernel.sh, booted by
# test/vm/vm_run.sh). It mounts the host's root read-only over 9p under a tmpfs
# overlay, so the build tree's programs run unchanged, runs /job/run inside it
# with its output in /job/output and its exit status in /job/status (/job is a
# writable 9p share of the host's job directory), and powers off.
/bin/busybox --install -s /bin
export PATH=/bin

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r module; do
  insmod "/modules/$module" || echo "init: insmod $module failed"
done </modules/order

modules_dir=
guest_ip=10.0.2.15/24
# shellcheck disable=SC2013 # the command line is one line of words
for arg in $(cat /proc/cmdline); do
  case "$arg" in
  blockcsi.modules=*) modules_dir=${arg#blockcsi.modules=} ;;
  blockcsi.ip=*) guest_ip=${arg#blockcsi.ip=} ;;
  esac
done

fail() {
  echo "init: $*"
  poweroff -f
}
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /host || fail "mount of the host's root failed"
mount -t tmpfs -o mode=755 upper /upper
mkdir -p /upper/upper /upper/work
mount -t overlay -o lowerdir=/host,upperdir=/upper/upper,workdir=/upper/work root /newroot ||
  fail "overlay over the host's root failed"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
ln -sf /proc/self/fd /newroot/dev/fd
ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout
ln -sf /proc/self/fd/2 /newroot/dev/stderr
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs shm /newroot/dev/shm
mount -t tmpfs -o mode=755 run /newroot/run
mkdir -p /newroot/run/lock
# The host's own /var/lib and /etc state is read from the overlay; what a test
# writes there lands in the tmpfs and is gone at power-off.
mkdir -p /newroot/job /newroot/lib/modules
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /newroot/job || fail "mount of the job share failed"
[ -n "$modules_dir" ] && mount -o bind "/newroot$modules_dir" /newroot/lib/modules

# The kernel runs its module loader (crc32c for iscsi_tcp, a fabric at its
# first configfs mkdir) in init's root, which is this initramfs: send it into
# the host's root, where the package's modules are.
printf '#!/bin/sh\nexec /bin/chroot /newroot /sbin/modprobe "$@"\n' >/bin/modprobe-in-root
chmod 755 /bin/modprobe-in-root
echo /bin/modprobe-in-root >/proc/sys/kernel/modprobe

ip link set lo up
if ip link show eth0 >/dev/null 2>&1; then
  ip link set eth0 up
  ip addr add "$guest_ip" dev eth0
fi
hostname blockcsi-vm
: >/newroot/job/booted

chroot /newroot /bin/sh /job/run >/newroot/job/output 2>&1 </dev/null
echo $? >/newroot/job/status
sync
poweroff -f
