// Helpers shared by the controller_*.cc files (the ControllerService RPCs):
// sizing, validation and filling CSI messages. Not an interface.
#pragma once

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/mkfs_mount_options.h"
#include "contract/chap_rules.h"
#include "contract/initiator.h"
#include "contract/publish_context.h"
#include "contract/static_volume.h"
#include "contract/volume_key.h"
#include "controller/capabilities.h"
#include "controller/controller_service.h"
#include "controller/parameters.h"

namespace blockcsi::controller_internal {

inline std::string Quoted(std::string_view id) { return "\"" + std::string(id) + "\""; }

// A backend's failure, prefixed with the volume/snapshot/node the CSI call
// is about, so that the CO's event names it whatever the backend said.
inline Status Named(const Status& status, std::string_view kind, const std::string& id) {
  if (status.ok()) return status;
  return status.WithContext(std::string(kind) + " " + Quoted(id));
}

// Whether the backend says the volume or snapshot does not exist. Backends
// answer NOT_FOUND for any id that names nothing of theirs, a malformed one
// included (backend.h), so any other code is a real failure to report.
inline bool IsMissing(const Status& status) { return status.code() == StatusCode::kNotFound; }

inline uint64_t RoundUp(uint64_t value, uint64_t granularity) {
  if (granularity <= 1) return value;
  return (value + granularity - 1) / granularity * granularity;
}

inline Status ValidateCapacityRange(const csi::v1::CapacityRange& range, std::string_view what) {
  if (range.required_bytes() < 0 || range.limit_bytes() < 0) {
    return InvalidArgument(std::string(what) + ": capacity_range bytes must not be negative");
  }
  if (range.limit_bytes() > 0 && range.required_bytes() > range.limit_bytes()) {
    // The spec's "unsupported capacity": no size satisfies the range.
    return OutOfRange(std::string(what) + ": required_bytes " + std::to_string(range.required_bytes()) +
                      " exceeds limit_bytes " + std::to_string(range.limit_bytes()));
  }
  return OkStatus();
}

// What an encrypted volume's device holds beyond what the pod gets (its
// LUKS2 header); 0 for a plain volume. Every size in the CSI API (the
// capacity range, capacity_bytes, a snapshot's size_bytes) is what the pod
// gets; the backend's record holds the device's size, this much more.
inline uint64_t HeaderBytes(bool encrypted) { return encrypted ? volume_key::kLuksHeaderBytes : 0; }
inline uint64_t HeaderBytes(const VolumeRecord& record) {
  return HeaderBytes(VolumeParametersFromRecord(record.parameters).encrypted);
}
// A device smaller than its header (made before the controller added it,
// or by hand) reports 0 rather than wrapping around.
inline uint64_t UsableBytes(uint64_t device_bytes, uint64_t header) {
  return device_bytes > header ? device_bytes - header : 0;
}

// The device size of a new volume: room for at least `required` and
// `source_bytes` (a clone or restore cannot be smaller than its source)
// after `header`, rounded up to the backend's granularity; what is left
// after the header never past the limit. `default_bytes` and `source_bytes`
// count what the pod gets, like the range.
inline StatusOr<uint64_t> ChooseVolumeSize(const csi::v1::CapacityRange& range, uint64_t granularity,
                                           uint64_t default_bytes, uint64_t source_bytes, std::string_view what,
                                           uint64_t header = 0) {
  const uint64_t required = static_cast<uint64_t>(range.required_bytes());
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  std::string name(what);
  if (required > 0 && required < source_bytes) {
    return OutOfRange(name + ": required_bytes " + std::to_string(required) + " is smaller than the source's " +
                      std::to_string(source_bytes) + " bytes");
  }
  if (limit > 0 && source_bytes > limit) {
    return OutOfRange(name + ": limit_bytes " + std::to_string(limit) + " is smaller than the source's " +
                      std::to_string(source_bytes) + " bytes");
  }
  const std::string with_header =
      header > 0 ? " plus the " + std::to_string(header) + "-byte LUKS2 header" : std::string();
  uint64_t size = 0;
  if (required == 0 && source_bytes == 0) {
    size = RoundUp(default_bytes + header, granularity);
    // No requirement but a small limit: the largest size under the limit.
    if (limit > 0 && size > limit + header) {
      size = granularity > 1 ? (limit + header) / granularity * granularity : limit + header;
    }
    if (size <= header) {
      return OutOfRange(name + ": limit_bytes " + std::to_string(limit) + with_header +
                        " is below the backend's granularity of " + std::to_string(granularity) + " bytes");
    }
  } else {
    size = RoundUp(std::max(required, source_bytes) + header, granularity);
  }
  if (limit > 0 && size > limit + header) {
    return OutOfRange(name + ": " + std::to_string(std::max(required, source_bytes)) + " bytes" + with_header +
                      " rounded up to the backend's granularity of " + std::to_string(granularity) + " bytes is " +
                      std::to_string(size) + ", past limit_bytes " + std::to_string(limit) + with_header);
  }
  if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return OutOfRange(name + ": capacity too large");
  }
  return size;
}

// A volume the node formats must be at least as large as its filesystem's
// minimum (after `header`, which the filesystem never sees): grow it to that
// when limit_bytes allows (the response reports the real capacity_bytes),
// else OUT_OF_RANGE naming the minimum.
inline StatusOr<uint64_t> RaiseToFilesystemMinimum(uint64_t size, uint64_t minimum, const std::string& fs_type,
                                                   const csi::v1::CapacityRange& range, uint64_t granularity,
                                                   std::string_view what, uint64_t header = 0) {
  if (size >= minimum + header) return size;
  const uint64_t raised = RoundUp(minimum + header, granularity);
  const uint64_t limit = static_cast<uint64_t>(range.limit_bytes());
  if (limit > 0 && raised > limit + header) {
    return OutOfRange(std::string(what) + ": " + fs_type + " needs at least " + std::to_string(minimum) +
                      " bytes on this host, more than limit_bytes " + std::to_string(limit));
  }
  return raised;
}

// Structure only (access type and mode present): a malformed capability is
// INVALID_ARGUMENT everywhere, an unsupported one may be "not confirmed".
inline Status ValidateCapabilityShape(const csi::v1::VolumeCapability& capability, std::string_view what) {
  if (!capability.has_block() && !capability.has_mount()) {
    return InvalidArgument(std::string(what) + ": volume capability has no access type (block or mount)");
  }
  if (!capability.has_access_mode()) {
    return InvalidArgument(std::string(what) + ": volume capability has no access mode");
  }
  return OkStatus();
}

inline void FillContentSource(const ContentSource& source, csi::v1::VolumeContentSource* out) {
  if (source.kind == ContentSource::Kind::kSnapshot) out->mutable_snapshot()->set_snapshot_id(source.id);
  if (source.kind == ContentSource::Kind::kVolume) out->mutable_volume()->set_volume_id(source.id);
}

inline void FillVolume(const VolumeRecord& record, csi::v1::Volume* out) {
  out->set_volume_id(record.id);
  out->set_capacity_bytes(static_cast<int64_t>(UsableBytes(record.size_bytes, HeaderBytes(record))));
  for (const auto& [k, v] : VolumeContextFor(VolumeParametersFromRecord(record.parameters))) {
    (*out->mutable_volume_context())[k] = v;
  }
  if (record.source.kind != ContentSource::Kind::kNone) FillContentSource(record.source, out->mutable_content_source());
  if (!record.topology.empty()) {
    auto* segments = out->add_accessible_topology()->mutable_segments();
    for (const auto& [k, v] : record.topology) (*segments)[k] = v;
  }
}

inline void FillSnapshot(const SnapshotRecord& record, csi::v1::Snapshot* out) {
  out->set_snapshot_id(record.id);
  out->set_source_volume_id(record.source_volume_id);
  // A snapshot of an encrypted volume (it carries the data key) has the
  // same header: its size is what a restore must give the pod.
  out->set_size_bytes(
      static_cast<int64_t>(UsableBytes(record.size_bytes, HeaderBytes(!record.wrapped_data_key.empty()))));
  out->set_ready_to_use(record.ready_to_use);
  *out->mutable_creation_time() = google::protobuf::util::TimeUtil::SecondsToTimestamp(record.created_unix_seconds);
}

inline std::vector<std::string> PublishedNodeIds(const VolumeRecord& record) {
  std::set<std::string> ids;
  for (const auto& grant : record.grants) {
    if (!grant.node_id.empty()) {
      ids.insert(grant.node_id);
    } else if (auto id = NodeIdFromInitiatorIqn(grant.initiator_iqn)) {
      ids.insert(*id);
    }
  }
  return {ids.begin(), ids.end()};
}

inline bool GrantIsForNode(const GrantRecord& grant, const std::string& node_id, const std::string& iqn) {
  return grant.initiator_iqn == iqn || (!grant.node_id.empty() && grant.node_id == node_id);
}

inline std::string GrantNodeName(const GrantRecord& grant) {
  return grant.node_id.empty() ? grant.initiator_iqn : grant.node_id;
}

// ---- encryption at rest (controller_encryption.cc) ----------------------

// What a new volume is made from, as far as its size and key go.
struct SourceFacts {
  ContentSource::Kind kind = ContentSource::Kind::kNone;
  std::string id;
  uint64_t bytes = 0;
  // The source's wrapped data key ("" when not encrypted) and the volume id
  // it is bound to (a snapshot's is its source volume's).
  std::string wrapped_data_key;
  std::string key_volume_id;
};

// The class's key-encryption key from the provisioner secret; none when the
// class is not encrypted. INVALID_ARGUMENT naming the parameter, the secret
// key and the volume when it is missing or not base64 of 32 bytes.
StatusOr<std::optional<SecretBytes>> ClassKek(const VolumeParameters& params,
                                              const google::protobuf::Map<std::string, std::string>& secrets,
                                              const std::string& name);

// INVALID_ARGUMENT naming both volumes when an encrypted source would go into
// an unencrypted class or the reverse, or when the source's key does not
// open under the class's KEK (`kek` null: the class is not encrypted).
Status CheckSourceEncryption(const SourceFacts& source, const SecretBytes* kek, const std::string& name);

// CreateVolume's second step for an encrypted class: the volume's data key
// (new, or its source's) wrapped with its id and stored by the backend,
// unless it has one (a retry). ALREADY_EXISTS when the volume found by name
// is encrypted and the class is not, or the reverse.
StatusOr<VolumeRecord> KeyNewVolume(VolumeBackend& backend, VolumeRecord record, const SecretBytes* kek,
                                    const SourceFacts& source, const std::string& name);

// FAILED_PRECONDITION for an encrypted volume without its wrapped key:
// CreateVolume's second step has not run (a crash between the two), so there
// is nothing the node could open it with; the provisioner's retry keys it.
Status CheckKeyed(const VolumeParameters& params, const VolumeRecord& record);

// What the node needs to find, log in to and verify the LUN, and an
// encrypted volume's wrapped data key. Never a secret.
inline std::map<std::string, std::string> PublishContextFor(const VolumeRecord& record, bool read_only, bool chap) {
  std::string portals;
  for (const auto& portal : record.portals) portals += (portals.empty() ? "" : ",") + portal;
  std::map<std::string, std::string> context{
      {publish_context::kPortals, portals},
      {publish_context::kTargetIqn, record.target_iqn},
      {publish_context::kLun, std::to_string(record.lun)},
      {publish_context::kSerial, record.serial},
      {publish_context::kWwn, record.wwn},
      {publish_context::kChapRequired, chap ? "true" : "false"},
      {publish_context::kTransport, record.transport.empty() ? "iscsi" : record.transport},
      {publish_context::kReadOnly, read_only ? "true" : "false"},
  };
  // Other transports (rbd: pool, image, monitors, user) describe themselves;
  // the backend promises these are never secrets. They cannot override the
  // keys above.
  for (const auto& [k, v] : record.transport_params) context.emplace(k, v);
  // Wrapped: only the node-stage secret's KEK opens it (contract/volume_key.h).
  if (!record.wrapped_data_key.empty()) context[volume_key::kWrappedDataKeyContext] = record.wrapped_data_key;
  return context;
}

// CHAP credentials from the controller-publish secrets. Errors name the
// missing key, never a value.
inline StatusOr<ChapCredentials> ChapFromSecrets(const google::protobuf::Map<std::string, std::string>& secrets,
                                                 const std::string& volume_id) {
  auto get = [&](const char* key) {
    auto it = secrets.find(key);
    return it == secrets.end() ? std::string() : it->second;
  };
  ChapCredentials chap{get(secret_keys::kChapUsername), get(secret_keys::kChapPassword),
                       get(secret_keys::kChapMutualUsername), get(secret_keys::kChapMutualPassword)};
  auto missing = [&](const char* key) {
    return InvalidArgument("volume " + Quoted(volume_id) +
                           " requires CHAP (StorageClass chap=true) but the controller-publish secret has no \"" + key +
                           "\" (set csi.storage.k8s.io/controller-publish-secret-name)");
  };
  if (chap.username.empty()) return missing(secret_keys::kChapUsername);
  if (chap.password.empty()) return missing(secret_keys::kChapPassword);
  if (!chap.mutual_username.empty() && chap.mutual_password.empty()) return missing(secret_keys::kChapMutualPassword);
  if (chap.mutual_username.empty() && !chap.mutual_password.empty()) return missing(secret_keys::kChapMutualUsername);
  // The rules the target and the node apply too (chap_rules.h): refused here
  // before anything reaches the backend.
  BLOCKCSI_RETURN_IF_ERROR(
      ValidateChapCredentials(chap, "volume " + Quoted(volume_id) + ": controller-publish secret"));
  return chap;
}

}  // namespace blockcsi::controller_internal
