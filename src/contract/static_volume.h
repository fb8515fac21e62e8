// Static volumes: a LUN blockcsi did not create, named by a
// PV's volumeAttributes with the in-tree `iscsi` volume plugin's field names
// so that an existing PV translates one to one. The controller turns the
// attributes into a publish_context (granting nothing: the array's admin
// owns its ACLs); the node parses that like any other, except that the
// LUN's identity (serial/wwn) is optional and the PV may name the initiator.
// Pure functions; thread-safe.
//
// How a static volume is recognised: its volume_context carries `iqn` or
// `targetPortal`. blockcsi's own volume_context (VolumeContextFor) never
// carries either, so there is no marker to forget, and an in-tree PV's
// attributes are enough on their own.
#pragma once

#include <map>
#include <string>

#include "common/status.h"

namespace blockcsi::static_attributes {

// The in-tree `iscsi` volume source's fields (spec.iscsi.*), as PV
// volumeAttributes strings.
inline constexpr char kTargetPortal[] = "targetPortal";  // "host[:port]", port 3260 by default
inline constexpr char kPortals[] = "portals";            // more portals: "a:3260,b:3260" or ["a:3260","b:3260"]
inline constexpr char kIqn[] = "iqn";
inline constexpr char kLun[] = "lun";
inline constexpr char kFsType[] = "fsType";
inline constexpr char kReadOnly[] = "readOnly";
inline constexpr char kChapAuthDiscovery[] = "chapAuthDiscovery";
inline constexpr char kChapAuthSession[] = "chapAuthSession";
inline constexpr char kInitiatorName[] = "initiatorName";
inline constexpr char kIscsiInterface[] = "iscsiInterface";
// blockcsi's own: the LUN's identity, checked on the node before use.
inline constexpr char kSerial[] = "serial";
inline constexpr char kWwn[] = "wwn";

}  // namespace blockcsi::static_attributes

namespace blockcsi {

// True when `volume_context` names a LUN directly (see above).
bool IsStaticVolume(const std::map<std::string, std::string>& volume_context);

// The publish_context for a static volume, every attribute checked as
// strictly as the node checks a publish_context. INVALID_ARGUMENT naming the
// volume and the attribute ("volume \"pv-1\": volumeAttributes lun ...").
// `read_only` is the request's (readonly flag or a read-only access mode);
// the attribute readOnly=true makes it read-only too.
StatusOr<std::map<std::string, std::string>> StaticPublishContext(
    const std::string& volume_id, const std::map<std::string, std::string>& volume_context, bool read_only);

}  // namespace blockcsi
