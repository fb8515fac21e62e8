// The dm-crypt (LUKS2) layer of an encrypted volume on the node: its data
// key from the node-stage secret and the publish context, and the exact
// cryptsetup commands that format, open, grow and close it, through the
// Executor seam. The key reaches cryptsetup on its stdin (`--key-file=-`),
// never in argv, the environment, a file or a log. Stateless; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/executor.h"
#include "common/host.h"
#include "common/status.h"
#include "contract/volume_key.h"

namespace blockcsi {

// Attach-record annotation naming the volume's dm-crypt mapping. Written
// with the attach itself (before anything is formatted or opened), so that
// unstage, a restarted plugin and `blockctl cleanup` know the layer is
// there even when a stage died half-way.
inline constexpr char kCryptAnnotation[] = "node.crypt";

// The mapping's name for `volume_id`, the same on every call and node:
// "blockcsi-<volume id>" when the id is a plain name (letters, digits, '.',
// '_', '-', starting with a letter or digit, at most 100 characters), else
// "blockcsi--" and 32 hex digits of the id's SHA-256 (dm names are at most
// 127 characters and may not hold '/'). A plain id never starts with '-', so
// the two forms never meet.
std::string CryptMappingName(std::string_view volume_id);
inline std::string CryptMappingPath(const std::string& name) { return "/dev/mapper/" + name; }

// Whether volume_context asks for encryption: false without the key, true
// for "luks2", INVALID_ARGUMENT for any other value (a node that does not
// know the scheme must not stage it as plain).
StatusOr<bool> WantsEncryption(std::string_view volume_id, const std::map<std::string, std::string>& volume_context);

// The volume's data key: the KEK from the node-stage secret, the wrapped key
// from publish_context. Either missing → INVALID_ARGUMENT naming it (never
// staged as plain); a KEK that is not 32 bytes of base64 → INVALID_ARGUMENT;
// a wrapped key that opens neither under the KEK nor under the
// `previousEncryptionKey` of the same secret (there during a key rotation)
// → PERMISSION_DENIED. No message carries a key.
StatusOr<SecretBytes> DataKeyForStage(const std::string& volume_id,
                                      const std::map<std::string, std::string>& publish_context,
                                      const std::map<std::string, std::string>& secrets);

// `cryptsetup luksFormat --type luks2` of a device the caller probed blank.
Status FormatLuks(Executor& executor, const std::string& volume_id, const std::string& device,
                  const SecretBytes& data_key);

// `cryptsetup open` of `device` as mapping `name`. A header the key does not
// open → PERMISSION_DENIED (the device is left as it is).
Status OpenLuks(Executor& executor, const std::string& volume_id, const std::string& device, const std::string& name,
                const SecretBytes& data_key, bool read_only);

// The number of keyslots in `cryptsetup luksDump --dump-json-metadata`
// output (LUKS2 only); INVALID_ARGUMENT for anything else.
StatusOr<size_t> ParseLuksKeyslotCount(std::string_view dump_json);

// Whether the LUKS2 header on `device` has no keyslot at all: what a
// luksFormat killed between writing its header and its first keyslot
// leaves. No passphrase opens such a header, so nobody can read what is
// behind it.
StatusOr<bool> LuksHeaderHasNoKeyslot(Executor& executor, const std::string& volume_id, const std::string& device);

// `cryptsetup resize`: the mapping follows its (rescanned) device.
Status ResizeLuks(Executor& executor, const std::string& volume_id, const std::string& name);

// `cryptsetup close` when the mapping exists; OK when it does not.
// `deferred`: a mapping still held (under a lazily unmounted filesystem) is
// removed by the kernel when its last user lets go.
Status CloseLuks(Executor& executor, const Host& host, const std::string& volume_id, const std::string& name,
                 bool deferred = false);

// "major:minor" of each device the mapping at `mapping_path` sits on
// (sysfs slaves); NOT_FOUND when there is no such mapping.
StatusOr<std::vector<std::string>> MappingBackingNumbers(const Host& host, const std::string& mapping_path);

}  // namespace blockcsi
