// A libiscsi initiator for tests: logs in with a chosen initiator name (and
// CHAP), reads capacity and does I/O. Never reconnects on its own, so a
// session the target closed stays closed. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

struct iscsi_context;

namespace blockcsi::testing {

struct IscsiLogin {
  std::string portal;  // host:port
  std::string target_iqn;
  std::string initiator_iqn;
  std::string chap_user, chap_password;
  std::string mutual_user, mutual_password;  // the target's credentials (mutual CHAP)
};

class IscsiClient {
 public:
  // nullptr and *error set when the login fails. `alias`: the InitiatorAlias
  // to send (any bytes but NUL, as a hostile initiator may); none when empty.
  static std::unique_ptr<IscsiClient> Login(const IscsiLogin& login, std::string* error, const std::string& alias = "");
  ~IscsiClient();
  IscsiClient(const IscsiClient&) = delete;
  IscsiClient& operator=(const IscsiClient&) = delete;

  // Capacity of LUN 1 in bytes; -1 on failure (unit attentions are retried).
  int64_t ReadCapacity(std::string* error = nullptr);
  bool Write(uint64_t lba, const std::string& block512, std::string* error = nullptr);
  bool Read(uint64_t lba, std::string* block512, std::string* error = nullptr);
  // VPD 0x80 serial (trimmed) and the 16-byte NAA designator of VPD 0x83 (hex).
  std::string Serial();
  std::string NaaWwn();

  // What the LUN advertises about thin provisioning, as an initiator (the
  // kernel's sd driver) reads it before it offers discard.
  struct Provisioning {
    bool lbpme = false;                // READ CAPACITY(16): logical block provisioning enabled
    bool lbpu = false;                 // VPD 0xB2: UNMAP supported
    bool lbpws = false;                // VPD 0xB2: WRITE SAME(16) with UNMAP supported
    uint32_t max_unmap_lba_count = 0;  // VPD 0xB0
  };
  // false with *error set when a page cannot be read.
  bool ReadProvisioning(Provisioning* out, std::string* error = nullptr);
  // SCSI UNMAP of `blocks` 512-byte blocks from `lba` (one descriptor).
  bool Unmap(uint64_t lba, uint32_t blocks, std::string* error = nullptr);

 private:
  explicit IscsiClient(iscsi_context* ctx) : ctx_(ctx) {}
  iscsi_context* ctx_;
};

}  // namespace blockcsi::testing
