#!/usr/bin/env bash
# Prepares what the test VM boots (test/vm/vm_run.sh): Debian's current generic
# kernel package, unpacked with its modules.dep, and a busybox initramfs whose
# /init mounts the host's root read-only over 9p under a tmpfs overlay.
#   hack/vm-kernel.sh      prints the directory holding vmlinuz (and vmlinux, the
#                          same kernel uncompressed, when it has a PVH entry),
#                          initrd.gz and lib/modules
# The cache lives outside the clone, beside the compiler cache
# ($BLOCKCSI_VM_CACHE, default /var/cache/blockcsi/vm), so every clone shares
# one download. Exits 77 (a skip for ctest) when the package or a tool cannot be had.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${BLOCKCSI_VM_CACHE:-/var/cache/blockcsi/vm}"

skip() {
  echo "vm-kernel: $*" >&2
  exit 77
}
for tool in apt-cache apt-get dpkg-deb cpio gzip xz; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool is not installed"
done
[ -x /sbin/depmod ] || skip "/sbin/depmod is missing (Debian package kmod)"
[ -x /bin/busybox ] || skip "/bin/busybox is missing (Debian package busybox-static)"
busybox_static=$(file -L /bin/busybox 2>/dev/null || true)
case "$busybox_static" in
*dynamically*) skip "/bin/busybox is dynamically linked: install busybox-static" ;;
esac

# extract_vmlinux <vmlinuz> <out>: the uncompressed kernel, kept only when it
# is an ELF with a PVH entry note (Xen note type 18), which QEMU's -kernel
# boots directly. It saves the firmware's load and the in-guest XZ
# decompression of the bzImage, about 12 of the 15 s before the kernel's
# first line under TCG.
extract_vmlinux() {
  local offset
  offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$1" | head -n 1 | cut -d: -f1)
  [ -n "$offset" ] || return 0
  tail -c +$((offset + 1)) "$1" | xz --decompress --stdout --single-stream >"$2.tmp" 2>/dev/null || true
  if command -v readelf >/dev/null 2>&1 && [ "$(head -c 4 "$2.tmp" | od -An -c | tr -d ' ')" = '177ELF' ] &&
    readelf -n "$2.tmp" 2>/dev/null | grep -q 'Unknown note type: (0x00000012)'; then
    mv "$2.tmp" "$2"
  else
    rm -f "$2.tmp"
  fi
}

# The exact package the metapackage depends on today: a glob would fetch every
# older build too.
package=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$package" ] || skip "apt-cache names no kernel package for linux-image-amd64"
version=${package#linux-image-}
dir="$cache/$version"
mkdir -p "$cache"

exec 9>"$cache/.lock"
flock 9

if [ ! -f "$dir/ready" ]; then
  rm -rf "$dir"
  work=$(mktemp -d "$cache/.unpack.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download "$package" >/dev/null 2>&1) ||
    skip "apt-get download $package failed (no network or no apt source)"
  mkdir -p "$work/root" "$work/out/lib"
  dpkg-deb -x "$work"/*.deb "$work/root"
  /sbin/depmod -b "$work/root" "$version"
  cp "$work/root/boot/vmlinuz-$version" "$work/out/vmlinuz"
  extract_vmlinux "$work/out/vmlinuz" "$work/out/vmlinux"
  mv "$work/root/lib/modules" "$work/out/lib/modules"
  echo "$package" >"$work/out/package"
  touch "$work/out/ready"
  mv "$work/out" "$dir"
  rm -rf "$work"
  trap - EXIT
fi

if [ ! -f "$dir/vmlinux" ] && [ ! -f "$dir/vmlinux.none" ]; then
  extract_vmlinux "$dir/vmlinuz" "$dir/vmlinux"
  [ -f "$dir/vmlinux" ] || : >"$dir/vmlinux.none"
fi

# The initramfs: busybox, /init (test/vm/guest_init.sh) and the modules that
# reach the host's root (virtio, 9p, overlay) with their dependencies, in load
# order. It is named by the init script's hash: a changed script gets a new one.
init_src="$here/../test/vm/guest_init.sh"
hash=$(sha256sum "$init_src" | cut -c1-16)
if [ ! -f "$dir/initrd-$hash.gz" ]; then
  initrd=$(mktemp -d "$cache/.initrd.XXXXXX")
  trap 'rm -rf "$initrd"' EXIT
  mkdir -p "$initrd"/{bin,dev,proc,sys,host,newroot,upper,modules}
  cp /bin/busybox "$initrd/bin/busybox"
  : >"$initrd/modules/order"
  for module in virtio_pci virtio_net 9pnet_virtio 9p overlay; do
    /sbin/modprobe -d "$dir" -S "$version" --show-depends "$module" |
      awk '$1 == "insmod" {print $2}' | while read -r path; do
      name=$(basename "$path")
      if ! grep -qx "$name" "$initrd/modules/order"; then
        cp "$path" "$initrd/modules/$name"
        echo "$name" >>"$initrd/modules/order"
      fi
    done
  done
  cp "$init_src" "$initrd/init"
  chmod 755 "$initrd/init"
  (cd "$initrd" && find . | cpio -o -H newc --quiet | gzip -1) >"$dir/.initrd-$hash.gz"
  mv "$dir/.initrd-$hash.gz" "$dir/initrd-$hash.gz"
  rm -rf "$initrd"
  trap - EXIT
fi
ln -sfn "initrd-$hash.gz" "$dir/initrd.gz"
echo "$dir"
