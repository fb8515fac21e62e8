#include "contract/volume_key.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cctype>
#include <memory>

namespace blockcsi {
namespace {

constexpr char kWrapPrefix[] = "v1.";
constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;
constexpr size_t kWrappedBytes = kNonceBytes + kDataKeyBytes + kTagBytes;

using CipherContext = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

std::string EncodeBase64(const std::string& raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(raw.data()), static_cast<int>(raw.size()));
  out.resize(n);
  return out;
}

// Strict base64 (the standard alphabet, padded); false on anything else.
bool DecodeBase64(std::string_view text, std::string* raw) {
  if (text.empty() || text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    bool pad = c == '=' && i + 2 >= text.size() && (i + 1 == text.size() || text[i + 1] == '=');
    if (!(pad || std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/')) return false;
  }
  size_t padding = text.size() - text.find_last_not_of('=') - 1;
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0 || static_cast<size_t>(n) < padding) return false;
  out.resize(static_cast<size_t>(n) - padding);
  *raw = std::move(out);
  return true;
}

std::string_view TrimAsciiSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

const unsigned char* Bytes(const std::string& s) { return reinterpret_cast<const unsigned char*>(s.data()); }
unsigned char* Bytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

}  // namespace

SecretBytes::SecretBytes(SecretBytes&& other) noexcept : bytes_(std::move(other.bytes_)) { other.Wipe(); }

SecretBytes& SecretBytes::operator=(SecretBytes&& other) noexcept {
  if (this != &other) {
    Wipe();
    bytes_ = std::move(other.bytes_);
    other.Wipe();
  }
  return *this;
}

SecretBytes::~SecretBytes() { Wipe(); }

void SecretBytes::Wipe() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
  bytes_.clear();
}

StatusOr<SecretBytes> ParseKeyEncryptionKey(std::string_view secret_value, std::string_view volume) {
  std::string raw;
  // A trailing newline is what `echo` adds when the Secret is made by hand.
  if (!DecodeBase64(TrimAsciiSpace(secret_value), &raw) || raw.size() != kKeyEncryptionKeyBytes) {
    SecretBytes wipe(std::move(raw));
    return InvalidArgument("secret key " + std::string(volume_key::kEncryptionKeySecret) + " of volume " +
                           std::string(volume) + " is not base64 of " + std::to_string(kKeyEncryptionKeyBytes) +
                           " bytes");
  }
  return SecretBytes(std::move(raw));
}

StatusOr<SecretBytes> NewDataKey() {
  std::string key(kDataKeyBytes, '\0');
  if (RAND_bytes(Bytes(key), static_cast<int>(key.size())) != 1) {
    return Internal("the system's random generator gave no data key");
  }
  return SecretBytes(std::move(key));
}

StatusOr<std::string> WrapDataKey(const SecretBytes& kek, const SecretBytes& data_key, std::string_view volume_id) {
  if (kek.size() != kKeyEncryptionKeyBytes || data_key.size() != kDataKeyBytes) {
    return Internal("wrapping the data key of volume " + std::string(volume_id) + ": wrong key sizes");
  }
  std::string blob(kWrappedBytes, '\0');
  if (RAND_bytes(Bytes(blob), kNonceBytes) != 1) {
    return Internal("the system's random generator gave no nonce for volume " + std::string(volume_id));
  }
  CipherContext ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int n = 0;
  bool ok =
      ctx != nullptr &&
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(kek.bytes()), Bytes(blob)) == 1 &&
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(volume_id.data()),
                        static_cast<int>(volume_id.size())) == 1 &&
      EVP_EncryptUpdate(ctx.get(), Bytes(blob) + kNonceBytes, &n, Bytes(data_key.bytes()),
                        static_cast<int>(kDataKeyBytes)) == 1 &&
      EVP_EncryptFinal_ex(ctx.get(), Bytes(blob) + kNonceBytes + n, &n) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, Bytes(blob) + kNonceBytes + kDataKeyBytes) == 1;
  if (!ok) return Internal("wrapping the data key of volume " + std::string(volume_id) + " failed");
  return kWrapPrefix + EncodeBase64(blob);
}

StatusOr<SecretBytes> UnwrapDataKey(const SecretBytes& kek, std::string_view wrapped, std::string_view volume_id) {
  std::string blob;
  if (wrapped.substr(0, sizeof(kWrapPrefix) - 1) != kWrapPrefix ||
      !DecodeBase64(wrapped.substr(sizeof(kWrapPrefix) - 1), &blob) || blob.size() != kWrappedBytes) {
    return InvalidArgument("the wrapped data key of volume " + std::string(volume_id) + " is malformed");
  }
  if (kek.size() != kKeyEncryptionKeyBytes) {
    return InvalidArgument("the key-encryption key for volume " + std::string(volume_id) + " has the wrong size");
  }
  std::string key(kDataKeyBytes, '\0');
  std::string tag = blob.substr(kNonceBytes + kDataKeyBytes);
  CipherContext ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int n = 0;
  bool ok =
      ctx != nullptr &&
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(kek.bytes()), Bytes(blob)) == 1 &&
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(volume_id.data()),
                        static_cast<int>(volume_id.size())) == 1 &&
      EVP_DecryptUpdate(ctx.get(), Bytes(key), &n, Bytes(blob) + kNonceBytes, static_cast<int>(kDataKeyBytes)) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, Bytes(tag)) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), Bytes(key) + n, &n) == 1;
  SecretBytes data_key(std::move(key));
  if (!ok) {
    return PermissionDenied("the data key of volume " + std::string(volume_id) +
                            " does not open under the given encryptionKey");
  }
  return data_key;
}

}  // namespace blockcsi
