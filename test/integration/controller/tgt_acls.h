// Reads the initiator ACLs of every target from `tgtadm --op show --mode
// target` output, so that tests can compare what tgtd enforces with what
// the VolumeAttachments say. Header-only; pure functions.
#pragma once

#include <map>
#include <set>
#include <sstream>
#include <string>

namespace blockcsi::testing {

// target IQN → initiator names in its ACL (targets without ACLs map to {}).
inline std::map<std::string, std::set<std::string>> ParseTgtAcls(const std::string& show_output) {
  std::map<std::string, std::set<std::string>> acls;
  std::istringstream in(show_output);
  std::string line, target;
  bool in_acl = false;
  while (std::getline(in, line)) {
    if (line.rfind("Target ", 0) == 0) {
      auto colon = line.find(": ");
      target = colon == std::string::npos ? "" : line.substr(colon + 2);
      acls[target];
      in_acl = false;
      continue;
    }
    auto first = line.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    std::string text = line.substr(first);
    if (first == 4) {  // a section header of the current target
      in_acl = text == "ACL information:";
      continue;
    }
    if (in_acl && first == 8 && !target.empty()) acls[target].insert(text);
  }
  return acls;
}

}  // namespace blockcsi::testing
