#include "common/topology.h"

#include <gtest/gtest.h>

namespace blockcsi {
namespace {

TEST(TopologyTest, ZoneNamesAreLabelValues) {
  for (const std::string& good : {std::string("a"), std::string("zone-a"), std::string("eu-west-1b"),
                                  std::string("Rack_3.row2"), std::string(63, 'z')}) {
    EXPECT_TRUE(ValidateZoneName(good, "--zone").ok()) << good;
  }
  for (std::string bad : {std::string(), std::string("-a"), std::string("a-"), std::string("a b"),
                          std::string("zone/a"), std::string(64, 'z')}) {
    Status st = ValidateZoneName(bad, "--zone");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("--zone"), std::string::npos) << st.message();
  }
}

TEST(TopologyTest, HostSegmentReachesRequestsThatAgreeOnItsKeys) {
  const TopologySegments zone_a{{kTopologyZoneKey, "a"}};
  const TopologySegments node_in_a{{"topology.blockcsi.io/node", "n1"}, {kTopologyZoneKey, "a"}};
  const TopologySegments node_in_b{{"topology.blockcsi.io/node", "n2"}, {kTopologyZoneKey, "b"}};
  const TopologySegments node_without_zone{{"topology.blockcsi.io/node", "n3"}};
  EXPECT_TRUE(SegmentReaches(zone_a, node_in_a));
  EXPECT_FALSE(SegmentReaches(zone_a, node_in_b));
  // A node that names no zone reaches no zoned host...
  EXPECT_FALSE(SegmentReaches(zone_a, node_without_zone));
  // ...while a host with no zone is reachable from every node.
  EXPECT_TRUE(SegmentReaches({}, node_in_b));
  EXPECT_TRUE(SegmentReaches({}, node_without_zone));
  EXPECT_TRUE(SegmentReaches({}, {}));
}

}  // namespace
}  // namespace blockcsi
