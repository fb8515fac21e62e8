// Encryption at rest, the controller's half (contract/volume_key.h): the
// class's key-encryption key from the provisioner secret, each volume's data
// key made here, wrapped with the volume's id and stored through the backend
// in that form only; a clone or restore keeps its source's data key,
// re-wrapped for its own id. The plain data key and the KEK live in
// SecretBytes for the length of one call and reach no log, error or record.
#include "common/logging.h"
#include "contract/volume_key.h"
#include "controller/controller_internal.h"

namespace blockcsi::controller_internal {

StatusOr<std::optional<SecretBytes>> ClassKek(const VolumeParameters& params,
                                              const google::protobuf::Map<std::string, std::string>& secrets,
                                              const std::string& name) {
  if (!params.encrypted) return std::optional<SecretBytes>();
  auto it = secrets.find(volume_key::kEncryptionKeySecret);
  if (it == secrets.end() || it->second.empty()) {
    return InvalidArgument("volume name " + Quoted(name) + ": StorageClass parameter " +
                           volume_key::kEncryptedParameter + "=\"true\" needs a key-encryption key under \"" +
                           volume_key::kEncryptionKeySecret +
                           "\" in the provisioner secret (csi.storage.k8s.io/provisioner-secret-name)");
  }
  BLOCKCSI_ASSIGN_OR_RETURN(SecretBytes kek, ParseKeyEncryptionKey(it->second, "name " + Quoted(name)));
  return std::optional<SecretBytes>(std::move(kek));
}

namespace {

std::string SourceName(const SourceFacts& source) {
  return source.kind == ContentSource::Kind::kSnapshot
             ? "snapshot " + Quoted(source.id) + " (of volume " + Quoted(source.key_volume_id) + ")"
             : "volume " + Quoted(source.id);
}

// The data key of the source, unwrapped with the new volume's class KEK.
StatusOr<SecretBytes> SourceDataKey(const SourceFacts& source, const SecretBytes& kek, const std::string& name) {
  auto key = UnwrapDataKey(kek, source.wrapped_data_key, source.key_volume_id);
  if (key.ok()) return key;
  // A clone stays under the key of its source's class: a class with another
  // KEK cannot open the source, and must not be told more than that.
  return InvalidArgument("volume name " + Quoted(name) + " cannot be made from " + SourceName(source) +
                         ": its data key does not open under this class's " + volume_key::kEncryptionKeySecret +
                         " (a clone or restore must use its source's class key)");
}

}  // namespace

Status CheckSourceEncryption(const SourceFacts& source, const SecretBytes* kek, const std::string& name) {
  if (source.kind == ContentSource::Kind::kNone) return OkStatus();
  const bool source_encrypted = !source.wrapped_data_key.empty();
  if (source_encrypted && kek == nullptr) {
    return InvalidArgument("volume name " + Quoted(name) + " (StorageClass not encrypted) cannot be made from " +
                           SourceName(source) + ", which is encrypted: its data would stay unreadable");
  }
  if (!source_encrypted && kek != nullptr) {
    return InvalidArgument("volume name " + Quoted(name) + " (StorageClass encrypted=\"true\") cannot be made from " +
                           SourceName(source) + ", which is not encrypted: its data would not open as LUKS2");
  }
  if (kek != nullptr) BLOCKCSI_RETURN_IF_ERROR(SourceDataKey(source, *kek, name).status());
  return OkStatus();
}

StatusOr<VolumeRecord> KeyNewVolume(VolumeBackend& backend, VolumeRecord record, const SecretBytes* kek,
                                    const SourceFacts& source, const std::string& name) {
  const bool record_encrypted = VolumeParametersFromRecord(record.parameters).encrypted;
  if (record_encrypted != (kek != nullptr)) {
    return AlreadyExists("volume name " + Quoted(name) + " already exists as " + Quoted(record.id) +
                         (record_encrypted ? ", encrypted" : ", not encrypted") +
                         ", unlike what this StorageClass asks for");
  }
  // A volume that has its key (a retried CreateVolume) keeps it: never a
  // second data key for the same data.
  if (kek == nullptr || !record.wrapped_data_key.empty()) return record;
  StatusOr<SecretBytes> data_key =
      source.kind == ContentSource::Kind::kNone ? NewDataKey() : SourceDataKey(source, *kek, name);
  BLOCKCSI_RETURN_IF_ERROR(data_key.status());
  BLOCKCSI_ASSIGN_OR_RETURN(std::string wrapped, WrapDataKey(*kek, *data_key, record.id));
  // The second step of an encrypted create: a crash before it leaves a
  // volume without a key, which the provisioner's retry (same name) keys
  // here; nothing can have used it, as publishing refuses it until then.
  Status stored = backend.SetWrappedDataKey(record.id, "", wrapped);
  if (!stored.ok()) {
    // A final failure leaves nothing behind (the provisioner does not come
    // back for it); the keyless volume was never published, so holds no data.
    if (IsFinalFailure(stored)) {
      Status undone = backend.DeleteVolume(record.id);
      if (!undone.ok())
        LogWarn("volume left without its data key", {{"volume", record.id}, {"error", undone.ToString()}});
    }
    return Named(stored, "volume", record.id);
  }
  record.wrapped_data_key = std::move(wrapped);
  LogInfo("volume keyed",
          {{"volume", record.id}, {"key", source.kind == ContentSource::Kind::kNone ? "new" : "from " + source.id}});
  return record;
}

Status CheckKeyed(const VolumeParameters& params, const VolumeRecord& record) {
  if (!params.encrypted || !record.wrapped_data_key.empty()) return OkStatus();
  return FailedPrecondition("volume " + Quoted(record.id) +
                            " is encrypted but has no data key yet (its CreateVolume has not completed)");
}

}  // namespace blockcsi::controller_internal
