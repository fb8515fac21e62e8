#include "common/block_probe.h"

#include <blkid/blkid.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace blockcsi {

std::string ProbeResult::Describe() const {
  if (signatures.empty()) return "no signature";
  std::string out;
  for (const auto& s : signatures) {
    if (!out.empty()) out += ", ";
    out += s.type + " (" + s.usage + ")";
  }
  return out;
}

namespace {

std::string Value(blkid_probe pr, const char* name) {
  const char* data = nullptr;
  size_t len = 0;
  if (blkid_probe_lookup_value(pr, name, &data, &len) != 0 || data == nullptr) return "";
  std::string v(data, len);
  while (!v.empty() && v.back() == '\0') v.pop_back();
  return v;
}

class BlkidProbe final : public BlockProbe {
 public:
  StatusOr<ProbeResult> Probe(const std::string& device) override {
    // O_EXCL is not used: a mounted device must still be probeable.
    int fd = ::open(device.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoToStatus(errno, "open " + device + " for probing");
    blkid_probe pr = blkid_new_probe();
    if (pr == nullptr) {
      ::close(fd);
      return ResourceExhausted("libblkid probe for " + device);
    }
    ProbeResult result;
    Status st;
    if (blkid_probe_set_device(pr, fd, 0, 0) != 0) {
      st = Internal("libblkid cannot use " + device);
    } else {
      result.size_bytes = static_cast<uint64_t>(blkid_probe_get_size(pr));
      // Superblocks (filesystems, LVM, RAID, crypto) and partition tables,
      // every match, not just the first: any signature at all forbids mkfs.
      blkid_probe_enable_superblocks(pr, 1);
      blkid_probe_set_superblocks_flags(
          pr, BLKID_SUBLKS_TYPE | BLKID_SUBLKS_USAGE | BLKID_SUBLKS_UUID | BLKID_SUBLKS_LABEL | BLKID_SUBLKS_BADCSUM);
      blkid_probe_enable_partitions(pr, 1);
      blkid_probe_set_partitions_flags(pr, BLKID_PARTS_FORCE_GPT);
      int rc;
      while ((rc = blkid_do_probe(pr)) == 0) {
        BlockSignature sig;
        sig.type = Value(pr, "TYPE");
        sig.usage = Value(pr, "USAGE");
        std::string pttype = Value(pr, "PTTYPE");
        if (sig.type.empty() && !pttype.empty()) {
          sig.type = pttype;
          sig.usage = "partition_table";
        }
        if (sig.type.empty()) sig.type = "unknown";
        if (sig.usage.empty()) sig.usage = "other";
        sig.uuid = Value(pr, "UUID");
        sig.label = Value(pr, "LABEL");
        bool duplicate = false;
        for (const auto& s : result.signatures) duplicate |= (s.type == sig.type && s.usage == sig.usage);
        if (!duplicate) result.signatures.push_back(std::move(sig));
      }
      if (rc < 0) st = Unavailable("libblkid failed to read " + device + " (I/O error?)");
    }
    blkid_free_probe(pr);
    ::close(fd);
    if (!st.ok()) return st;
    return result;
  }
};

}  // namespace

std::unique_ptr<BlockProbe> MakeBlkidProbe() { return std::make_unique<BlkidProbe>(); }

}  // namespace blockcsi
