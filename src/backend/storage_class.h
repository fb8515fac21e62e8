// The StorageClass parameter keys that the driver itself owns (as opposed to
// a backend's SupportedParameters()). Here, below the controller, because
// the routing backend picks a backend by kBackend and must not hand the
// driver's keys on. Their meaning: controller/parameters.h.
#pragma once

namespace blockcsi {

namespace storage_class {
inline constexpr char kFsType[] = "fsType";
inline constexpr char kMkfsOptions[] = "mkfsOptions";
inline constexpr char kChap[] = "chap";
inline constexpr char kBackend[] = "backend";
inline constexpr char kSidecarPrefix[] = "csi.storage.k8s.io/";
inline constexpr char kSidecarFsType[] = "csi.storage.k8s.io/fstype";
}  // namespace storage_class

}  // namespace blockcsi
