#include "backend/remote/target_proto.h"

namespace blockcsi {

void ToProto(const ContentSource& in, targetpb::ContentSource* out) {
  switch (in.kind) {
    case ContentSource::Kind::kNone:
      out->set_kind(targetpb::ContentSource::NONE);
      break;
    case ContentSource::Kind::kSnapshot:
      out->set_kind(targetpb::ContentSource::SNAPSHOT);
      break;
    case ContentSource::Kind::kVolume:
      out->set_kind(targetpb::ContentSource::VOLUME);
      break;
  }
  out->set_id(in.id);
}

StatusOr<ContentSource> FromProto(const targetpb::ContentSource& in) {
  ContentSource out;
  switch (in.kind()) {
    case targetpb::ContentSource::NONE:
      out.kind = ContentSource::Kind::kNone;
      break;
    case targetpb::ContentSource::SNAPSHOT:
      out.kind = ContentSource::Kind::kSnapshot;
      break;
    case targetpb::ContentSource::VOLUME:
      out.kind = ContentSource::Kind::kVolume;
      break;
    default:
      return InvalidArgument("content source kind " + std::to_string(static_cast<int>(in.kind())) +
                             " is neither a snapshot nor a volume");
  }
  out.id = in.id();
  return out;
}

void ToProto(const VolumeRecord& in, targetpb::Volume* out) {
  out->set_id(in.id);
  out->set_name(in.name);
  out->set_size_bytes(in.size_bytes);
  out->set_created_unix_seconds(in.created_unix_seconds);
  ToProto(in.source, out->mutable_source());
  out->mutable_parameters()->insert(in.parameters.begin(), in.parameters.end());
  for (const auto& p : in.portals) out->add_portals(p);
  out->set_target_iqn(in.target_iqn);
  out->set_lun(in.lun);
  out->set_serial(in.serial);
  out->set_wwn(in.wwn);
  out->set_transport(in.transport);
  for (const auto& g : in.grants) {
    auto* pg = out->add_grants();
    pg->set_initiator_iqn(g.initiator_iqn);
    pg->set_node_id(g.node_id);
    pg->set_read_only(g.read_only);
    pg->set_capability(g.capability);
    pg->set_chap(g.chap);
  }
  out->mutable_topology()->insert(in.topology.begin(), in.topology.end());
  out->set_allocated_bytes(in.allocated_bytes);
  out->set_wrapped_data_key(in.wrapped_data_key);
}

VolumeRecord FromProto(const targetpb::Volume& in) {
  VolumeRecord out;
  out.id = in.id();
  out.name = in.name();
  out.size_bytes = in.size_bytes();
  out.created_unix_seconds = in.created_unix_seconds();
  // An answer whose source this build cannot read keeps no source at all.
  auto source = FromProto(in.source());
  if (source.ok()) out.source = *source;
  out.parameters.insert(in.parameters().begin(), in.parameters().end());
  out.portals.assign(in.portals().begin(), in.portals().end());
  out.target_iqn = in.target_iqn();
  out.lun = in.lun();
  out.serial = in.serial();
  out.wwn = in.wwn();
  out.transport = in.transport().empty() ? "iscsi" : in.transport();
  for (const auto& g : in.grants()) {
    out.grants.push_back({g.initiator_iqn(), g.node_id(), g.read_only(), g.capability(), g.chap()});
  }
  out.topology.insert(in.topology().begin(), in.topology().end());
  out.allocated_bytes = in.allocated_bytes();
  out.wrapped_data_key = in.wrapped_data_key();
  return out;
}

void ToProto(const SnapshotRecord& in, targetpb::Snapshot* out) {
  out->set_id(in.id);
  out->set_name(in.name);
  out->set_source_volume_id(in.source_volume_id);
  out->set_size_bytes(in.size_bytes);
  out->set_created_unix_seconds(in.created_unix_seconds);
  out->set_ready_to_use(in.ready_to_use);
  out->set_wrapped_data_key(in.wrapped_data_key);
}

SnapshotRecord FromProto(const targetpb::Snapshot& in) {
  SnapshotRecord out;
  out.id = in.id();
  out.name = in.name();
  out.source_volume_id = in.source_volume_id();
  out.size_bytes = in.size_bytes();
  out.created_unix_seconds = in.created_unix_seconds();
  out.ready_to_use = in.ready_to_use();
  out.wrapped_data_key = in.wrapped_data_key();
  return out;
}

void ToProto(const ChapCredentials& in, targetpb::Chap* out) {
  out->set_username(in.username);
  out->set_password(in.password);
  out->set_mutual_username(in.mutual_username);
  out->set_mutual_password(in.mutual_password);
}

ChapCredentials FromProto(const targetpb::Chap& in) {
  return {in.username(), in.password(), in.mutual_username(), in.mutual_password()};
}

void ToProto(const FenceRecord& in, targetpb::Fence* out) {
  out->set_node_id(in.node_id);
  out->set_initiator_iqn(in.initiator_iqn);
  out->set_since_unix_seconds(in.since_unix_seconds);
  for (const auto& h : in.held) {
    auto* ph = out->add_held();
    ph->set_volume_id(h.volume_id);
    auto* pg = ph->mutable_grant();
    pg->set_initiator_iqn(h.grant.initiator_iqn);
    pg->set_node_id(h.grant.node_id);
    pg->set_read_only(h.grant.read_only);
    pg->set_capability(h.grant.capability);
    pg->set_chap(h.grant.chap);
  }
}

FenceRecord FromProto(const targetpb::Fence& in) {
  FenceRecord out{in.node_id(), in.initiator_iqn(), in.since_unix_seconds(), {}};
  for (const auto& h : in.held()) {
    const auto& g = h.grant();
    out.held.push_back({h.volume_id(), {g.initiator_iqn(), g.node_id(), g.read_only(), g.capability(), g.chap()}});
  }
  return out;
}

}  // namespace blockcsi
