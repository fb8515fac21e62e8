#include "integration/target/iscsi_client.h"

extern "C" {
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
}

#include <cstdio>
#include <functional>

namespace blockcsi::testing {
namespace {

constexpr int kLun = 1;

bool IsUnitAttention(scsi_task* task) {
  return task != nullptr && task->status == SCSI_STATUS_CHECK_CONDITION && task->sense.key == SCSI_SENSE_UNIT_ATTENTION;
}

// Issues a command again while it is answered with a UNIT ATTENTION (a LUN
// re-added or grown says so once), up to four times; `use` sees a good
// answer's task before it is freed.
bool IssueRidingUnitAttention(iscsi_context* ctx, const std::function<scsi_task*()>& issue, std::string* error,
                              const std::function<void(scsi_task*)>& use = nullptr) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    scsi_task* task = issue();
    if (task == nullptr) {
      if (error != nullptr) *error = iscsi_get_error(ctx);
      return false;
    }
    bool ua = IsUnitAttention(task);
    bool ok = task->status == SCSI_STATUS_GOOD;
    if (ok && use) use(task);
    scsi_free_scsi_task(task);
    if (ua) continue;
    if (!ok && error != nullptr) *error = iscsi_get_error(ctx);
    return ok;
  }
  return false;
}

}  // namespace

std::unique_ptr<IscsiClient> IscsiClient::Login(const IscsiLogin& login, std::string* error, const std::string& alias) {
  iscsi_context* ctx = iscsi_create_context(login.initiator_iqn.c_str());
  if (ctx == nullptr) {
    *error = "iscsi_create_context failed";
    return nullptr;
  }
  // The default reconnect loop blocks forever; tests want a closed session
  // to stay closed and a refused login to fail quickly.
  iscsi_set_noautoreconnect(ctx, 1);
  iscsi_set_reconnect_max_retries(ctx, 0);
  iscsi_set_timeout(ctx, 5);
  iscsi_set_targetname(ctx, login.target_iqn.c_str());
  if (!alias.empty()) iscsi_set_alias(ctx, alias.c_str());
  iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
  iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
  if (!login.chap_user.empty()) {
    iscsi_set_initiator_username_pwd(ctx, login.chap_user.c_str(), login.chap_password.c_str());
  }
  if (!login.mutual_user.empty()) {
    iscsi_set_target_username_pwd(ctx, login.mutual_user.c_str(), login.mutual_password.c_str());
  }
  if (iscsi_full_connect_sync(ctx, login.portal.c_str(), kLun) != 0) {
    *error = iscsi_get_error(ctx);
    iscsi_destroy_context(ctx);
    return nullptr;
  }
  return std::unique_ptr<IscsiClient>(new IscsiClient(ctx));
}

IscsiClient::~IscsiClient() {
  iscsi_logout_sync(ctx_);
  iscsi_destroy_context(ctx_);
}

int64_t IscsiClient::ReadCapacity(std::string* error) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    scsi_task* task = iscsi_readcapacity16_sync(ctx_, kLun);
    if (task == nullptr) {
      if (error != nullptr) *error = iscsi_get_error(ctx_);
      return -1;
    }
    if (IsUnitAttention(task)) {  // capacity changed / LUN re-added: ask again
      scsi_free_scsi_task(task);
      continue;
    }
    if (task->status != SCSI_STATUS_GOOD) {
      if (error != nullptr) *error = iscsi_get_error(ctx_);
      scsi_free_scsi_task(task);
      return -1;
    }
    auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task));
    int64_t bytes = rc16 == nullptr ? -1 : static_cast<int64_t>((rc16->returned_lba + 1) * rc16->block_length);
    scsi_free_scsi_task(task);
    return bytes;
  }
  if (error != nullptr) *error = "unit attention did not clear";
  return -1;
}

bool IscsiClient::Write(uint64_t lba, const std::string& block, std::string* error) {
  return IssueRidingUnitAttention(
      ctx_,
      [&] {
        return iscsi_write16_sync(ctx_, kLun, lba, reinterpret_cast<unsigned char*>(const_cast<char*>(block.data())),
                                  static_cast<uint32_t>(block.size()), 512, 0, 0, 0, 0, 0);
      },
      error);
}

bool IscsiClient::Read(uint64_t lba, std::string* block, std::string* error) {
  return IssueRidingUnitAttention(
      ctx_, [&] { return iscsi_read16_sync(ctx_, kLun, lba, 512, 512, 0, 0, 0, 0, 0); }, error,
      [&](scsi_task* task) {
        block->assign(reinterpret_cast<char*>(task->datain.data), static_cast<size_t>(task->datain.size));
      });
}

bool IscsiClient::ReadProvisioning(Provisioning* out, std::string* error) {
  auto fail = [&](scsi_task* task, const char* what) {
    if (error != nullptr) *error = std::string(what) + ": " + iscsi_get_error(ctx_);
    if (task != nullptr) scsi_free_scsi_task(task);
    return false;
  };
  *out = {};
  scsi_task* task = iscsi_readcapacity16_sync(ctx_, kLun);
  if (IsUnitAttention(task)) {
    scsi_free_scsi_task(task);
    task = iscsi_readcapacity16_sync(ctx_, kLun);
  }
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return fail(task, "READ CAPACITY(16)");
  auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(task));
  if (rc16 == nullptr) return fail(task, "READ CAPACITY(16) unreadable");
  out->lbpme = rc16->lbpme != 0;
  scsi_free_scsi_task(task);

  task = iscsi_inquiry_sync(ctx_, kLun, 1, SCSI_INQUIRY_PAGECODE_LOGICAL_BLOCK_PROVISIONING, 255);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return fail(task, "VPD 0xB2");
  auto* lbp = static_cast<scsi_inquiry_logical_block_provisioning*>(scsi_datain_unmarshall(task));
  if (lbp == nullptr) return fail(task, "VPD 0xB2 unreadable");
  out->lbpu = lbp->lbpu != 0;
  out->lbpws = lbp->lbpws != 0;
  scsi_free_scsi_task(task);

  task = iscsi_inquiry_sync(ctx_, kLun, 1, SCSI_INQUIRY_PAGECODE_BLOCK_LIMITS, 255);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) return fail(task, "VPD 0xB0");
  auto* limits = static_cast<scsi_inquiry_block_limits*>(scsi_datain_unmarshall(task));
  if (limits == nullptr) return fail(task, "VPD 0xB0 unreadable");
  out->max_unmap_lba_count = limits->max_unmap;
  scsi_free_scsi_task(task);
  return true;
}

bool IscsiClient::Unmap(uint64_t lba, uint32_t blocks, std::string* error) {
  unmap_list range{lba, blocks};
  return IssueRidingUnitAttention(
      ctx_, [&] { return iscsi_unmap_sync(ctx_, kLun, 0, 0, &range, 1); }, error);
}

std::string IscsiClient::Serial() {
  scsi_task* task = iscsi_inquiry_sync(ctx_, kLun, 1, SCSI_INQUIRY_PAGECODE_UNIT_SERIAL_NUMBER, 255);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) {
    if (task != nullptr) scsi_free_scsi_task(task);
    return "";
  }
  auto* page = static_cast<scsi_inquiry_unit_serial_number*>(scsi_datain_unmarshall(task));
  std::string serial = page != nullptr && page->usn != nullptr ? page->usn : "";
  scsi_free_scsi_task(task);
  size_t start = serial.find_first_not_of(' ');
  return start == std::string::npos ? "" : serial.substr(start, serial.find_last_not_of(' ') - start + 1);
}

std::string IscsiClient::NaaWwn() {
  scsi_task* task = iscsi_inquiry_sync(ctx_, kLun, 1, SCSI_INQUIRY_PAGECODE_DEVICE_IDENTIFICATION, 255);
  if (task == nullptr || task->status != SCSI_STATUS_GOOD) {
    if (task != nullptr) scsi_free_scsi_task(task);
    return "";
  }
  auto* page = static_cast<scsi_inquiry_device_identification*>(scsi_datain_unmarshall(task));
  std::string wwn;
  for (auto* d = page != nullptr ? page->designators : nullptr; d != nullptr; d = d->next) {
    if (d->designator_type != SCSI_DESIGNATOR_TYPE_NAA || d->designator_length != 16) continue;
    char hex[3];
    for (int i = 0; i < d->designator_length; ++i) {
      std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(d->designator[i]));
      wwn += hex;
    }
    break;
  }
  scsi_free_scsi_task(task);
  return wwn;
}

}  // namespace blockcsi::testing
