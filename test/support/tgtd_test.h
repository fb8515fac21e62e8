// TgtdTest: a gtest fixture with a private tgtd of its own (tgtd_), for the
// suites that drive a real tgtd. Apart from tgtd_harness.h so that the
// programs using the harness need no gtest.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "support/tgtd_harness.h"

namespace blockcsi::testing {

// SetUp starts tgtd, or skips or fails as BLOCKCSI_REQUIRE_TGTD says. A
// subclass's SetUp calls it first and returns when the test skipped or
// failed.
class TgtdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    tgtd_ = TgtdHarness::Start(&error);
    BLOCKCSI_REQUIRE_TGTD(tgtd_, error);
  }

  std::unique_ptr<TgtdHarness> tgtd_;
};

}  // namespace blockcsi::testing
