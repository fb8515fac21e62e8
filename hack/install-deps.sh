#!/usr/bin/env bash
# Installs what blockcsi needs to build, test and run its demo on Debian 12.
# Idempotent and quick when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake pkg-config git ninja-build ccache
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev nlohmann-json3-dev libcli11-dev libinih-dev libyaml-cpp-dev libgtest-dev libgmock-dev
  libmount-dev libblkid-dev libiscsi-dev libiscsi-bin libfuse3-dev fuse3 liburing-dev
  tgt open-iscsi e2fsprogs xfsprogs btrfs-progs fdisk util-linux iproute2 openssl fio gnuplot-nox
  clang clang-format clang-tidy shellcheck yamllint python3 python3-yaml
  ceph-mon ceph-mgr ceph-osd ceph-common librbd-dev librados-dev libcpp-httplib-dev prometheus
  etcd-server
  qemu-system-x86 busybox-static cpio kmod multipath-tools
)
# kubectl (for rendering the kustomize manifests) may come from another
# package already; Debian's kubernetes-client would clash with it.
if ! command -v kubectl >/dev/null 2>&1; then
  packages+=(kubernetes-client)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
