#include "support/linkage.h"

#include "support/test_util.h"

namespace blockcsi::testing {

::testing::AssertionResult LinksNoneOf(const std::string& program, const std::vector<std::string>& parts) {
  std::string error;
  std::vector<std::string> needed = NeededLibraries(program, &error);
  if (needed.empty()) return ::testing::AssertionFailure() << "no NEEDED libraries: " << error;
  std::string links;
  for (const std::string& library : needed) {
    for (const std::string& part : parts) {
      if (library.find(part) != std::string::npos) links += " " + library;
    }
  }
  if (links.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << program << " links" << links;
}

}  // namespace blockcsi::testing
