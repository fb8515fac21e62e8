// The one set of rules CHAP credentials must meet before they reach tgtd,
// LIO or an initiator. The controller applies it to ControllerPublish
// secrets, the target backend to every grant (in-process or through the
// agent), the node to NodeStage secrets, so that a value one of them accepts
// is one all of them accept. Pure functions; thread-safe.
//
// Why these limits:
// - tgtadm hands tgtd "user=<name>,password=<secret>" and prints account
//   names one per line in `--op show`: a ',' or '=' splits the request, a
//   newline forges output lines, so names are a small allow-list and secrets
//   printable ASCII without separators, quotes or spaces.
// - tgtd copies names and secrets into ISCSI_NAME_LEN (256) buffers, LIO's
//   configfs auth attributes hold 255 bytes: at most 255 bytes each.
// - RFC 3720 §8.2.1 wants CHAP secrets of at least 96 bits; initiators
//   (Windows, open-iscsi's docs) expect 12 bytes or more: at least 12.
// - RFC 3720 §8.2.1: a secret used to authenticate initiators MUST NOT be
//   used to authenticate targets, so the mutual secret must differ.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/chap.h"
#include "common/status.h"

namespace blockcsi {

inline constexpr size_t kChapNameMaxBytes = 255;
inline constexpr size_t kChapSecretMinBytes = 12;
inline constexpr size_t kChapSecretMaxBytes = 255;

// A CHAP user name: 1..255 bytes of letters, digits, '.', '-', '_', ':',
// '@', starting with a letter or digit (IQN- and e-mail-like names fit).
bool IsValidChapName(std::string_view name);

// Checks every field and their combination. All four empty: no CHAP (OK).
// A user without a password or the reverse, a mutual pair without the
// one-way pair, or half of a mutual pair: INVALID_ARGUMENT, never a silent
// downgrade. `context` names the object and the source of the values
// ("volume vol-1: controller-publish secret"); the message names the field
// (by its secret key) and never contains a value.
Status ValidateChapCredentials(const ChapCredentials& chap, std::string_view context);

}  // namespace blockcsi
