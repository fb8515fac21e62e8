#include "contract/chap_rules.h"

#include <string>

#include "contract/publish_context.h"

namespace blockcsi {
namespace {

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// Printable ASCII without the space, the separators of tgtadm's request
// ("user=..,password=..") and the quotes and backslash of config files.
bool IsSecretChar(char c) {
  if (c <= 0x20 || c >= 0x7f) return false;
  return c != ',' && c != '=' && c != '"' && c != '\'' && c != '\\';
}

Status Invalid(std::string_view context, const char* key, std::string_view why) {
  return InvalidArgument(std::string(context) + " " + key + " " + std::string(why));
}

Status CheckName(std::string_view value, std::string_view context, const char* key) {
  if (value.size() > kChapNameMaxBytes) {
    return Invalid(context, key, "is longer than " + std::to_string(kChapNameMaxBytes) + " bytes");
  }
  if (!IsValidChapName(value)) {
    return Invalid(context, key,
                   "may contain only letters, digits, '.', '-', '_', ':' and '@', and must start with a letter or "
                   "digit");
  }
  return OkStatus();
}

Status CheckSecret(std::string_view value, std::string_view context, const char* key) {
  if (value.size() < kChapSecretMinBytes) {
    return Invalid(context, key, "is shorter than " + std::to_string(kChapSecretMinBytes) + " bytes (RFC 3720 §8.2.1)");
  }
  if (value.size() > kChapSecretMaxBytes) {
    return Invalid(context, key, "is longer than " + std::to_string(kChapSecretMaxBytes) + " bytes");
  }
  for (char c : value) {
    if (!IsSecretChar(c)) {
      return Invalid(context, key, "may contain only printable ASCII without spaces, ',', '=', quotes or backslashes");
    }
  }
  return OkStatus();
}

// A name and its secret come as a pair: both or neither.
Status CheckPair(const std::string& name, const std::string& secret, std::string_view context, const char* name_key,
                 const char* secret_key) {
  if (name.empty() && !secret.empty())
    return Invalid(context, secret_key, std::string("is set but ") + name_key + " is not");
  if (!name.empty() && secret.empty())
    return Invalid(context, name_key, std::string("is set but ") + secret_key + " is not");
  if (name.empty()) return OkStatus();
  BLOCKCSI_RETURN_IF_ERROR(CheckName(name, context, name_key));
  return CheckSecret(secret, context, secret_key);
}

}  // namespace

bool IsValidChapName(std::string_view name) {
  if (name.empty() || name.size() > kChapNameMaxBytes || !IsAlnum(name.front())) return false;
  for (char c : name) {
    if (!IsAlnum(c) && c != '.' && c != '-' && c != '_' && c != ':' && c != '@') return false;
  }
  return true;
}

Status ValidateChapCredentials(const ChapCredentials& chap, std::string_view context) {
  using namespace secret_keys;  // NOLINT(google-build-using-namespace): the four key names
  BLOCKCSI_RETURN_IF_ERROR(CheckPair(chap.username, chap.password, context, kChapUsername, kChapPassword));
  BLOCKCSI_RETURN_IF_ERROR(
      CheckPair(chap.mutual_username, chap.mutual_password, context, kChapMutualUsername, kChapMutualPassword));
  if (!chap.mutual_username.empty() && chap.username.empty()) {
    return Invalid(context, kChapMutualUsername, std::string("is set without one-way CHAP (") + kChapUsername + ")");
  }
  if (!chap.mutual_password.empty() && chap.mutual_password == chap.password) {
    return Invalid(context, kChapMutualPassword,
                   std::string("must differ from ") + kChapPassword + " (RFC 3720 §8.2.1)");
  }
  return OkStatus();
}

}  // namespace blockcsi
