#include "controller/volume_keys_service.h"

#include "common/grpc_status.h"
#include "controller/key_rotation.h"

namespace blockcsi {

namespace kpb = ::blockcsi::keys::v1;

namespace {

kpb::RewrappedKey::Outcome ToProto(RewrapOutcome::Kind kind) {
  switch (kind) {
    case RewrapOutcome::Kind::kRewrapped:
      return kpb::RewrappedKey::REWRAPPED;
    case RewrapOutcome::Kind::kAlreadyNew:
      return kpb::RewrappedKey::ALREADY_NEW;
    case RewrapOutcome::Kind::kNotOpened:
      return kpb::RewrappedKey::NOT_OPENED;
    case RewrapOutcome::Kind::kFailed:
      break;
  }
  return kpb::RewrappedKey::FAILED;
}

}  // namespace

grpc::Status VolumeKeysService::RewrapDataKeys(grpc::ServerContext*, const kpb::RewrapDataKeysRequest* request,
                                               kpb::RewrapDataKeysResponse* response) {
  // The messages name the field, never its value (ParseKeyEncryptionKey).
  auto old_kek = ParseKeyEncryptionKey(request->old_encryption_key(), "(rotation: old_encryption_key)");
  if (!old_kek.ok()) return ToGrpcStatus(old_kek.status());
  auto new_kek = ParseKeyEncryptionKey(request->new_encryption_key(), "(rotation: new_encryption_key)");
  if (!new_kek.ok()) return ToGrpcStatus(new_kek.status());
  if (old_kek->bytes() == new_kek->bytes()) {
    return ToGrpcStatus(InvalidArgument("the old and the new encryptionKey are the same key: nothing to rotate"));
  }
  auto report = ::blockcsi::RewrapDataKeys(*backend_, *old_kek, *new_kek, request->dry_run());
  if (!report.ok()) return ToGrpcStatus(report.status());
  for (const auto& o : report->outcomes) {
    auto* key = response->add_keys();
    key->set_id(o.id);
    key->set_snapshot(o.snapshot);
    key->set_outcome(ToProto(o.kind));
    key->set_message(o.message);
  }
  return grpc::Status::OK;
}

}  // namespace blockcsi
