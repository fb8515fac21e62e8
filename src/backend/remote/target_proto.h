// Conversions between the VolumeBackend types and proto/target.proto, shared
// by the agent's server and the remote backend's client so that both sides
// read the wire the same way. Pure functions; thread-safe.
#pragma once

#include "backend/backend.h"
#include "target.pb.h"

namespace blockcsi {

namespace targetpb = ::blockcsi::target::v1;

void ToProto(const VolumeRecord& in, targetpb::Volume* out);
VolumeRecord FromProto(const targetpb::Volume& in);
void ToProto(const SnapshotRecord& in, targetpb::Snapshot* out);
SnapshotRecord FromProto(const targetpb::Snapshot& in);
void ToProto(const ContentSource& in, targetpb::ContentSource* out);
// INVALID_ARGUMENT for a kind this build does not know: proto3 keeps an
// enum number it has no name for, which must not pass for "none".
StatusOr<ContentSource> FromProto(const targetpb::ContentSource& in);
void ToProto(const ChapCredentials& in, targetpb::Chap* out);
ChapCredentials FromProto(const targetpb::Chap& in);
void ToProto(const FenceRecord& in, targetpb::Fence* out);
FenceRecord FromProto(const targetpb::Fence& in);

}  // namespace blockcsi
