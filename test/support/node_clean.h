// The last step of the teardown of every suite that runs plugins under one
// directory of its own: CleanUpUnder() it, then fail the test for whatever
// is still there (a process, mount or loop device CleanUpUnder could not
// remove would outlive the test and disturb the next one).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "support/plugin_under_test.h"

namespace blockcsi::testing {

inline void CleanUpAndExpectNothingUnder(const std::string& dir) {
  CleanUpUnder(dir);
  EXPECT_TRUE(ProcessesNaming(dir).empty()) << "processes left under " << dir;
  EXPECT_TRUE(MountsUnder(dir).empty()) << "mounts left under " << dir;
  EXPECT_TRUE(LoopDevicesUnder(dir).empty()) << "loop devices left under " << dir;
}

}  // namespace blockcsi::testing
