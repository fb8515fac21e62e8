#include "support/csi_calls.h"

#include <filesystem>

namespace blockcsi::testing {

CsiCalls::CsiCalls(std::string node_id, std::string fs_type, std::map<std::string, std::string> secrets)
    : node_id_(std::move(node_id)), fs_type_(std::move(fs_type)), secrets_(std::move(secrets)) {}

grpc::Status CsiCalls::Create(PluginUnderTest& plugin, const std::string& name, int64_t bytes, CsiVolume* v) const {
  csi::v1::CreateVolumeRequest req;
  req.set_name(name);
  req.mutable_capacity_range()->set_required_bytes(bytes);
  *req.add_volume_capabilities() = CapabilityFor(fs_type_);
  req.mutable_secrets()->insert(secrets_.begin(), secrets_.end());
  csi::v1::CreateVolumeResponse resp;
  grpc::Status st = plugin.controller().CreateVolume(Deadline().get(), req, &resp);
  v->id = resp.volume().volume_id();
  v->context = {resp.volume().volume_context().begin(), resp.volume().volume_context().end()};
  return st;
}

grpc::Status CsiCalls::ControllerPublish(PluginUnderTest& plugin, CsiVolume* v) const {
  csi::v1::ControllerPublishVolumeRequest req;
  req.set_volume_id(v->id);
  req.set_node_id(node_id_);
  *req.mutable_volume_capability() = CapabilityFor(fs_type_);
  csi::v1::ControllerPublishVolumeResponse resp;
  grpc::Status st = plugin.controller().ControllerPublishVolume(Deadline().get(), req, &resp);
  v->publish_context = {resp.publish_context().begin(), resp.publish_context().end()};
  return st;
}

grpc::Status CsiCalls::Stage(PluginUnderTest& plugin, const CsiVolume& v) const {
  csi::v1::NodeStageVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_staging_target_path(plugin.staging_path(v.id));
  *req.mutable_volume_capability() = CapabilityFor(fs_type_);
  req.mutable_publish_context()->insert(v.publish_context.begin(), v.publish_context.end());
  req.mutable_volume_context()->insert(v.context.begin(), v.context.end());
  req.mutable_secrets()->insert(secrets_.begin(), secrets_.end());
  std::filesystem::create_directories(plugin.staging_path(v.id));  // kubelet makes it
  csi::v1::NodeStageVolumeResponse resp;
  return plugin.node().NodeStageVolume(Deadline().get(), req, &resp);
}

grpc::Status CsiCalls::Publish(PluginUnderTest& plugin, const CsiVolume& v, bool readonly) const {
  csi::v1::NodePublishVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_readonly(readonly);
  req.set_staging_target_path(plugin.staging_path(v.id));
  req.set_target_path(plugin.target_path(v.id));
  *req.mutable_volume_capability() = CapabilityFor(fs_type_);
  req.mutable_publish_context()->insert(v.publish_context.begin(), v.publish_context.end());
  req.mutable_volume_context()->insert(v.context.begin(), v.context.end());
  std::filesystem::create_directories(std::filesystem::path(plugin.target_path(v.id)).parent_path());
  csi::v1::NodePublishVolumeResponse resp;
  return plugin.node().NodePublishVolume(Deadline().get(), req, &resp);
}

grpc::Status CsiCalls::Unpublish(PluginUnderTest& plugin, const CsiVolume& v) const {
  csi::v1::NodeUnpublishVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_target_path(plugin.target_path(v.id));
  csi::v1::NodeUnpublishVolumeResponse resp;
  return plugin.node().NodeUnpublishVolume(Deadline().get(), req, &resp);
}

grpc::Status CsiCalls::Unstage(PluginUnderTest& plugin, const CsiVolume& v) const {
  csi::v1::NodeUnstageVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_staging_target_path(plugin.staging_path(v.id));
  csi::v1::NodeUnstageVolumeResponse resp;
  return plugin.node().NodeUnstageVolume(Deadline().get(), req, &resp);
}

grpc::Status CsiCalls::ControllerUnpublish(PluginUnderTest& plugin, const CsiVolume& v) const {
  csi::v1::ControllerUnpublishVolumeRequest req;
  req.set_volume_id(v.id);
  req.set_node_id(node_id_);
  csi::v1::ControllerUnpublishVolumeResponse resp;
  return plugin.controller().ControllerUnpublishVolume(Deadline().get(), req, &resp);
}

grpc::Status CsiCalls::Delete(PluginUnderTest& plugin, const CsiVolume& v) const {
  csi::v1::DeleteVolumeRequest req;
  req.set_volume_id(v.id);
  req.mutable_secrets()->insert(secrets_.begin(), secrets_.end());
  csi::v1::DeleteVolumeResponse resp;
  return plugin.controller().DeleteVolume(Deadline().get(), req, &resp);
}

}  // namespace blockcsi::testing
