// CSI request builders shared by the controller's and the routing backend's
// unit tests and the conformance suite, which send the same requests
// in-process and over gRPC.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "csi.pb.h"
#include "support/csi_capabilities.h"

namespace blockcsi::testing {

// CreateVolume of `name` with `required_bytes`, for one capability.
inline csi::v1::CreateVolumeRequest CreateRequest(const std::string& name, int64_t required_bytes,
                                                  const csi::v1::VolumeCapability& cap = MountCapability()) {
  csi::v1::CreateVolumeRequest r;
  r.set_name(name);
  r.mutable_capacity_range()->set_required_bytes(required_bytes);
  *r.add_volume_capabilities() = cap;
  return r;
}

inline csi::v1::ControllerPublishVolumeRequest PublishRequest(const std::string& id, const std::string& node,
                                                              const csi::v1::VolumeCapability& cap = MountCapability(),
                                                              bool readonly = false) {
  csi::v1::ControllerPublishVolumeRequest r;
  r.set_volume_id(id);
  r.set_node_id(node);
  *r.mutable_volume_capability() = cap;
  r.set_readonly(readonly);
  return r;
}

inline csi::v1::ControllerUnpublishVolumeRequest UnpublishRequest(const std::string& id, const std::string& node) {
  csi::v1::ControllerUnpublishVolumeRequest r;
  r.set_volume_id(id);
  r.set_node_id(node);
  return r;
}

// ControllerExpandVolume of `id` to `bytes`, with the volume's capability
// when `cap` is given.
inline csi::v1::ControllerExpandVolumeRequest ExpandRequest(const std::string& id, int64_t bytes,
                                                            const csi::v1::VolumeCapability* cap = nullptr) {
  csi::v1::ControllerExpandVolumeRequest r;
  r.set_volume_id(id);
  r.mutable_capacity_range()->set_required_bytes(bytes);
  if (cap != nullptr) *r.mutable_volume_capability() = *cap;
  return r;
}

// ListVolumes page after page, `max_entries` each, through `list` (the
// fixture's call: (request, response*) -> grpc::Status) until a page has no
// next_token or `max_pages` pages were read. A failed call or a page larger
// than asked fails the test.
template <typename List>
std::vector<csi::v1::ListVolumesResponse> ListVolumePages(List list, int max_entries, int max_pages) {
  std::vector<csi::v1::ListVolumesResponse> pages;
  std::string token;
  do {
    csi::v1::ListVolumesRequest r;
    r.set_max_entries(max_entries);
    r.set_starting_token(token);
    csi::v1::ListVolumesResponse resp;
    grpc::Status st = list(r, &resp);
    EXPECT_TRUE(st.ok()) << "ListVolumes: " << st.error_code() << " " << st.error_message();
    if (!st.ok()) break;
    EXPECT_LE(resp.entries_size(), max_entries);
    token = resp.next_token();
    pages.push_back(std::move(resp));
  } while (!token.empty() && static_cast<int>(pages.size()) < max_pages);
  return pages;
}

}  // namespace blockcsi::testing
