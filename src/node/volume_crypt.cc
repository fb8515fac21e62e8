#include "node/volume_crypt.h"

#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <chrono>

#include "common/logging.h"
#include "common/metrics.h"

namespace blockcsi {
namespace {

using std::chrono::minutes;

// cryptsetup's exit code for "no key available with this passphrase"
// (cryptsetup(8), RETURN CODES): the one failure that means a wrong key.
constexpr int kCryptsetupWrongKey = 2;

bool IsPlainName(std::string_view id) {
  if (id.empty() || id.size() > 100 || !std::isalnum(static_cast<unsigned char>(id.front()))) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// The key on stdin, marked sensitive: the executor blanks it wherever it
// would show (logs, error messages that echo input).
Command KeyedCommand(const SecretBytes& data_key) {
  return Command("cryptsetup").Stdin(data_key.bytes(), /*sensitive=*/true);
}

}  // namespace

std::string CryptMappingName(std::string_view volume_id) {
  if (IsPlainName(volume_id)) return "blockcsi-" + std::string(volume_id);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(volume_id.data(), volume_id.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "blockcsi--";
  for (unsigned int i = 0; i < 16 && i < length; ++i) {
    name += kHex[digest[i] >> 4];
    name += kHex[digest[i] & 0xf];
  }
  return name;
}

StatusOr<bool> WantsEncryption(std::string_view volume_id, const std::map<std::string, std::string>& volume_context) {
  auto it = volume_context.find(volume_key::kEncryptionContext);
  if (it == volume_context.end()) return false;
  if (it->second == volume_key::kEncryptionLuks2) return true;
  return InvalidArgument("volume " + std::string(volume_id) + ": volume_context " + volume_key::kEncryptionContext +
                         "=\"" + it->second + "\" is not a scheme this node knows (" + volume_key::kEncryptionLuks2 +
                         "); refusing to stage it");
}

StatusOr<SecretBytes> DataKeyForStage(const std::string& volume_id,
                                      const std::map<std::string, std::string>& publish_context,
                                      const std::map<std::string, std::string>& secrets) {
  auto kek_value = secrets.find(volume_key::kEncryptionKeySecret);
  if (kek_value == secrets.end() || kek_value->second.empty()) {
    return InvalidArgument("volume " + volume_id + " is encrypted but the node-stage secrets hold no " +
                           volume_key::kEncryptionKeySecret +
                           " (the StorageClass must name its key Secret as csi.storage.k8s.io/node-stage-secret-name)");
  }
  auto wrapped = publish_context.find(volume_key::kWrappedDataKeyContext);
  if (wrapped == publish_context.end() || wrapped->second.empty()) {
    return InvalidArgument("volume " + volume_id + " is encrypted but publish_context has no " +
                           volume_key::kWrappedDataKeyContext);
  }
  BLOCKCSI_ASSIGN_OR_RETURN(SecretBytes kek, ParseKeyEncryptionKey(kek_value->second, volume_id));
  auto key = UnwrapDataKey(kek, wrapped->second, volume_id);
  if (key.ok() || key.status().code() != StatusCode::kPermissionDenied) return key;
  // Mid-rotation: the class's Secret holds the new KEK, but this volume's
  // VolumeAttachment still carries the key wrapped under the old one.
  auto previous = secrets.find(volume_key::kPreviousEncryptionKeySecret);
  if (previous == secrets.end() || previous->second.empty()) return key;
  auto old_kek = ParseKeyEncryptionKey(previous->second, volume_id);
  if (!old_kek.ok()) {
    return InvalidArgument("volume " + volume_id + ": node-stage secret " + volume_key::kPreviousEncryptionKeySecret +
                           ": " + old_kek.status().message());
  }
  auto old = UnwrapDataKey(*old_kek, wrapped->second, volume_id);
  return old.ok() ? std::move(old) : std::move(key);
}

Status FormatLuks(Executor& executor, const std::string& volume_id, const std::string& device,
                  const SecretBytes& data_key) {
  // PBKDF2 at its minimum: the passphrase is a random 256-bit data key, which
  // no key stretching makes harder to guess, while the default argon2id
  // would take up to 1 GiB of memory and seconds of CPU at every open (a
  // node plugin with a memory limit is OOM-killed mid-stage).
  Command cmd = KeyedCommand(data_key);
  cmd.Arg("luksFormat").Arg("--type").Arg("luks2").Arg("--batch-mode");
  cmd.Arg("--pbkdf").Arg("pbkdf2").Arg("--pbkdf-force-iterations").Arg("1000");
  // The data offset pinned (in 512-byte sectors) rather than left to
  // cryptsetup's default: the controller sized the device for exactly this
  // header, so the mapping holds the capacity it reported.
  cmd.Arg("--offset").Arg(std::to_string(volume_key::kLuksHeaderBytes / 512));
  cmd.Arg("--key-file=-").Arg(device).Timeout(minutes(5));
  LogInfo("formatting LUKS2", {{"volume_id", volume_id}, {"device", device}});
  auto ran = RunChecked(executor, cmd);
  RecordOperation("luks_format", ran.status());
  return ran.status().WithContext("volume " + volume_id);
}

Status OpenLuks(Executor& executor, const std::string& volume_id, const std::string& device, const std::string& name,
                const SecretBytes& data_key, bool read_only) {
  // --disable-keyring keeps the volume key in the dm-crypt table instead of
  // the kernel keyring: `cryptsetup resize` then needs no key, and
  // NodeExpandVolume (which carries no publish_context) can grow the mapping.
  Command cmd = KeyedCommand(data_key);
  cmd.Arg("open").Arg("--type").Arg("luks2").Arg("--key-file=-").Arg("--disable-keyring");
  if (read_only) cmd.Arg("--readonly");
  cmd.Arg(device).Arg(name).Timeout(minutes(2));
  BLOCKCSI_ASSIGN_OR_RETURN(CommandResult r, executor.Run(cmd));
  if (r.exit_code == kCryptsetupWrongKey && !r.timed_out) {
    RecordOperation("luks_open", PermissionDenied(""));
    return PermissionDenied("volume " + volume_id + ": the LUKS2 header on " + device +
                            " does not open with the volume's data key; refusing to stage it (it is never "
                            "reformatted): is this the volume's own key Secret?");
  }
  if (!r.ok()) {
    Status failed = Internal("volume " + volume_id + ": " + DescribeFailure(cmd, r));
    RecordOperation("luks_open", failed);
    return failed;
  }
  RecordOperation("luks_open", OkStatus());
  LogInfo("opened dm-crypt mapping", {{"volume_id", volume_id}, {"device", device}, {"mapping", name}});
  return OkStatus();
}

StatusOr<size_t> ParseLuksKeyslotCount(std::string_view dump_json) {
  const nlohmann::json dump = nlohmann::json::parse(dump_json, nullptr, /*allow_exceptions=*/false);
  if (dump.is_discarded() || !dump.is_object() || !dump.contains("keyslots") || !dump["keyslots"].is_object() ||
      !dump.contains("segments")) {
    return InvalidArgument("cryptsetup luksDump: not the JSON metadata of a LUKS2 header");
  }
  return dump["keyslots"].size();
}

StatusOr<bool> LuksHeaderHasNoKeyslot(Executor& executor, const std::string& volume_id, const std::string& device) {
  Command cmd = Command("cryptsetup").Arg("luksDump").Arg("--dump-json-metadata").Arg(device).Timeout(minutes(1));
  auto ran = RunChecked(executor, cmd);
  if (!ran.ok()) return ran.status().WithContext("volume " + volume_id);
  auto count = ParseLuksKeyslotCount(ran->stdout_text);
  if (!count.ok()) return count.status().WithContext("volume " + volume_id + ": " + device);
  return *count == 0;
}

Status ResizeLuks(Executor& executor, const std::string& volume_id, const std::string& name) {
  Command cmd = Command("cryptsetup").Arg("resize").Arg(name).Timeout(minutes(2));
  return RunChecked(executor, cmd).status().WithContext("volume " + volume_id);
}

Status CloseLuks(Executor& executor, const Host& host, const std::string& volume_id, const std::string& name,
                 bool deferred) {
  if (host.Kind(CryptMappingPath(name)) == PathKind::kMissing) return OkStatus();
  // A filesystem still mounted on the mapping makes this fail (busy):
  // the callers unmount first and stop there on that error.
  Command cmd = Command("cryptsetup").Arg("close");
  if (deferred) cmd.Arg("--deferred");
  cmd.Arg(name).Timeout(minutes(2));
  auto ran = RunChecked(executor, cmd, StatusCode::kFailedPrecondition);
  if (!ran.ok()) return ran.status().WithContext("volume " + volume_id + ": close dm-crypt mapping " + name);
  LogInfo("closed dm-crypt mapping", {{"volume_id", volume_id}, {"mapping", name}});
  return OkStatus();
}

StatusOr<std::vector<std::string>> MappingBackingNumbers(const Host& host, const std::string& mapping_path) {
  BLOCKCSI_ASSIGN_OR_RETURN(std::string number, host.DeviceNumber(mapping_path));
  std::string slaves = "/sys/dev/block/" + number + "/slaves";
  BLOCKCSI_ASSIGN_OR_RETURN(std::vector<std::string> names, host.ListDir(slaves));
  std::vector<std::string> out;
  for (const auto& name : names) {
    BLOCKCSI_ASSIGN_OR_RETURN(std::string dev, ReadTrimmed(host, slaves + "/" + name + "/dev"));
    out.push_back(dev);
  }
  return out;
}

}  // namespace blockcsi
