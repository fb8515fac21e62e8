// Secret redaction for protobuf messages. CSI marks secret fields with the
// `csi_secret` field option; we walk the descriptor instead of listing fields
// by hand, so a secret field added to the proto is redacted automatically.
// Pure functions; thread-safe.
#pragma once

#include <string>

namespace google::protobuf {
class Message;
}

namespace blockcsi {

inline constexpr char kRedacted[] = "***";

// Replaces the value of every `csi_secret` field (strings and the values of
// string maps; keys stay visible) with kRedacted, recursing into messages.
void RedactSecretsInPlace(google::protobuf::Message* message);

// A one-line JSON rendering of `message` with secrets redacted.
std::string RedactedJson(const google::protobuf::Message& message);

}  // namespace blockcsi
