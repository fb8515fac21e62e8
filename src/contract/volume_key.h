// Keys of encrypted volumes (LUKS2), as the controller makes them and the
// node opens them.
//
// Hierarchy: a key-encryption key (KEK) per StorageClass lives in a
// Kubernetes Secret the class names (key "encryptionKey", base64 of exactly
// 32 random bytes) and reaches the controller as a provisioner secret and the
// node as a node-stage secret. Each volume has its own random 32-byte data
// key: the LUKS2 passphrase on the node. The data key exists in plain form
// only in memory, for the length of one call; everywhere it is stored or
// carried (backend metadata, publish_context) it is wrapped: AES-256-GCM under
// the KEK with the volume id as associated data, so a wrapped key copied onto
// another volume does not open.
//
// Wrapped form: "v1." + base64(nonce[12] | ciphertext[32] | tag[16]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace blockcsi {

inline constexpr size_t kKeyEncryptionKeyBytes = 32;
inline constexpr size_t kDataKeyBytes = 32;

namespace volume_key {
// StorageClass parameter: "true" asks for an encrypted volume.
inline constexpr char kEncryptedParameter[] = "encrypted";
// Secret key (provisioner and node-stage secrets) holding the KEK.
inline constexpr char kEncryptionKeySecret[] = "encryptionKey";
// Node-stage secret key, optional, during a key rotation: the class's
// previous KEK. A VolumeAttachment keeps the publish_context it was made
// with, so a node may be handed a data key wrapped under the old KEK after
// the rotation; it tries this key when the wrapped key does not open under
// encryptionKey. The controller never reads it.
inline constexpr char kPreviousEncryptionKeySecret[] = "previousEncryptionKey";
// volume_context: "luks2" on an encrypted volume (the node refuses to stage
// it as plain); publish_context: the volume's wrapped data key.
inline constexpr char kEncryptionContext[] = "encryption";
inline constexpr char kEncryptionLuks2[] = "luks2";
inline constexpr char kWrappedDataKeyContext[] = "wrappedDataKey";
// Where the data starts on an encrypted volume's device: the LUKS2 header
// (two metadata copies and the keyslots) takes the first 16 MiB. The node
// formats with exactly this data offset, and the controller makes the LUN or
// image this much bigger than the capacity it reports, so that the opened
// dm-crypt device the pod gets holds at least the bytes asked for.
inline constexpr uint64_t kLuksHeaderBytes = uint64_t{16} << 20;
}  // namespace volume_key

// Bytes that are wiped when they go. Not copyable, so that a key is never
// left behind in a stray copy; moved, the source is left empty.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(std::string bytes) : bytes_(std::move(bytes)) {}
  SecretBytes(SecretBytes&& other) noexcept;
  SecretBytes& operator=(SecretBytes&& other) noexcept;
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;
  ~SecretBytes();

  const std::string& bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }

 private:
  void Wipe();
  std::string bytes_;
};

// The KEK from a secret's value. INVALID_ARGUMENT naming the secret key and
// the volume when it is not base64 of exactly 32 bytes; the value itself is
// never in the message.
StatusOr<SecretBytes> ParseKeyEncryptionKey(std::string_view secret_value, std::string_view volume);

// 32 bytes from the system's CSPRNG.
StatusOr<SecretBytes> NewDataKey();

// The wrapped form of data_key for volume_id.
StatusOr<std::string> WrapDataKey(const SecretBytes& kek, const SecretBytes& data_key, std::string_view volume_id);

// The data key back. INVALID_ARGUMENT when `wrapped` is not of the wrapped
// form; PERMISSION_DENIED when it does not open under this KEK for this
// volume (a wrong key, a key of another class, a blob of another volume, or
// a tampered blob: GCM cannot tell these apart, and none of them may open).
StatusOr<SecretBytes> UnwrapDataKey(const SecretBytes& kek, std::string_view wrapped, std::string_view volume_id);

}  // namespace blockcsi
