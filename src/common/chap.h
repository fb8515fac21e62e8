// CHAP credentials, as the controller sets them on a target and the node
// presents them at login. Secret: never logged, persisted, put in an error
// message, a publish_context or a logged argv.
#pragma once

#include <string>

namespace blockcsi {

struct ChapCredentials {
  std::string username;
  std::string password;
  std::string mutual_username;  // empty: one-way CHAP
  std::string mutual_password;
  bool enabled() const { return !username.empty(); }
  bool mutual() const { return !mutual_username.empty(); }
};

}  // namespace blockcsi
