// CheckContentSource (backend.h): the one check of a CreateVolume's source,
// shared by every backend.
#include "backend/backend.h"
#include "backend/volume_id.h"

namespace blockcsi {

Status CheckContentSource(const CreateVolumeSpec& spec) {
  const ContentSource& source = spec.source;
  const std::string what = "content source of volume " + QuoteId(spec.name);
  switch (source.kind) {
    case ContentSource::Kind::kNone:
      // A blank volume: an id here would be kept in its record as if the
      // volume had been made from it.
      if (!source.id.empty()) return InvalidArgument(what + " names " + QuoteId(source.id) + " but no kind");
      return OkStatus();
    case ContentSource::Kind::kSnapshot:
    case ContentSource::Kind::kVolume:
      if (source.id.empty()) return InvalidArgument(what + " has a kind but no id");
      return OkStatus();
  }
  return InvalidArgument(what + " is of kind " + std::to_string(static_cast<int>(source.kind)) +
                         ", neither a snapshot nor a volume");
}

}  // namespace blockcsi
