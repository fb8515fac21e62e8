// For the tests that a library is loaded only on first use (issue #18): what
// a program links, as gtest verdicts. Kept apart from test_util.h so that
// only those tests see gtest through it.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace blockcsi::testing {

// Success when no NEEDED library of `program` (readelf -d) contains one of
// `parts`; else a failure naming each library that does, or why readelf
// listed none.
::testing::AssertionResult LinksNoneOf(const std::string& program, const std::vector<std::string>& parts);

}  // namespace blockcsi::testing
