// The CO's side of one volume's lifecycle against a PluginUnderTest, as the
// external-provisioner, external-attacher and kubelet make the calls (kubelet
// makes the staging directory and the target's parent). Shared by the e2e
// suites and the lifecycle benchmark, which time or count the same calls.
// Stateless; the plugin is passed per call because tests restart it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "support/plugin_under_test.h"

namespace blockcsi::testing {

// One volume as the CO knows it between calls.
struct CsiVolume {
  std::string id;
  std::map<std::string, std::string> context;          // CreateVolume's volume_context
  std::map<std::string, std::string> publish_context;  // ControllerPublishVolume's
};

class CsiCalls {
 public:
  // A filesystem volume of `fs_type` ("block": a raw block volume), published to `node_id`; `secrets` go
  // with CreateVolume, NodeStageVolume and DeleteVolume (none by default).
  explicit CsiCalls(std::string node_id, std::string fs_type = "ext4", std::map<std::string, std::string> secrets = {});

  grpc::Status Create(PluginUnderTest& plugin, const std::string& name, int64_t bytes, CsiVolume* v) const;
  grpc::Status ControllerPublish(PluginUnderTest& plugin, CsiVolume* v) const;
  grpc::Status Stage(PluginUnderTest& plugin, const CsiVolume& v) const;
  grpc::Status Publish(PluginUnderTest& plugin, const CsiVolume& v, bool readonly = false) const;
  grpc::Status Unpublish(PluginUnderTest& plugin, const CsiVolume& v) const;
  grpc::Status Unstage(PluginUnderTest& plugin, const CsiVolume& v) const;
  grpc::Status ControllerUnpublish(PluginUnderTest& plugin, const CsiVolume& v) const;
  grpc::Status Delete(PluginUnderTest& plugin, const CsiVolume& v) const;

 private:
  std::string node_id_;
  std::string fs_type_;
  std::map<std::string, std::string> secrets_;
};

}  // namespace blockcsi::testing
