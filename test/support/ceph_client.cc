#include "support/ceph_client.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

namespace blockcsi::testing {
namespace {

// A read-only handle on `image`; < 0 when it cannot be opened (or the
// client never connected).
int OpenReadOnly(rados_ioctx_t io, const std::string& image, rbd_image_t* h) {
  if (io == nullptr) return -ENOTCONN;
  return rbd_open_read_only(io, image.c_str(), h, nullptr);
}

std::vector<std::string> WatchersOf(rbd_image_t image) {
  std::vector<std::string> out;
  rbd_image_watcher_t w[16];
  size_t n = 16;
  if (rbd_watchers_list(image, w, &n) < 0) return out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(w[i].addr);
  rbd_watchers_list_cleanup(w, n);
  return out;
}

}  // namespace

CephClient::CephClient(const std::string& conf, const std::string& user, const std::string& keyring,
                       const std::string& pool) {
  if (rados_create2(&cluster_, "ceph", ("client." + user).c_str(), 0) < 0) return;
  rados_conf_read_file(cluster_, conf.c_str());
  rados_conf_set(cluster_, "keyring", keyring.c_str());
  rados_conf_set(cluster_, "rados_osd_op_timeout", "20");
  rados_conf_set(cluster_, "rados_mon_op_timeout", "20");
  error_ = rados_connect(cluster_);
  if (error_ == 0) error_ = rados_ioctx_create(cluster_, pool.c_str(), &io_);
}

CephClient::~CephClient() {
  CloseImage();
  if (io_ != nullptr) rados_ioctx_destroy(io_);
  if (cluster_ != nullptr) rados_shutdown(cluster_);
}

int CephClient::OpenImage(const std::string& image) {
  CloseImage();
  if (io_ == nullptr) return -ENOTCONN;
  return rbd_open(io_, image.c_str(), &image_, nullptr);
}

void CephClient::CloseImage() {
  if (image_ != nullptr) rbd_close(image_);
  image_ = nullptr;
}

int CephClient::Write(uint64_t offset, const std::string& data) {
  ssize_t n = rbd_write(image_, offset, data.size(), data.data());
  if (n < 0) return static_cast<int>(n);
  if (static_cast<size_t>(n) != data.size()) return -EIO;
  return rbd_flush(image_);
}

std::string CephClient::Read(uint64_t offset, size_t len) {
  std::string buf(len, '\0');
  ssize_t n = rbd_read(image_, offset, len, buf.data());
  if (n < 0) return "<read error " + std::to_string(n) + ">";
  buf.resize(static_cast<size_t>(n));
  return buf;
}

std::vector<std::string> CephClient::Watchers() { return WatchersOf(image_); }

int CephClient::SetMetadata(const std::string& key, const std::string& value) {
  return rbd_metadata_set(image_, key.c_str(), value.c_str());
}

std::optional<std::string> CephClient::Metadata(const std::string& image, const std::string& key) {
  rbd_image_t h = nullptr;
  if (OpenReadOnly(io_, image, &h) < 0) return "<open failed>";
  char value[4096] = {};
  size_t len = sizeof value;
  int r = rbd_metadata_get(h, key.c_str(), value, &len);
  rbd_close(h);
  if (r < 0) return std::nullopt;
  return std::string(value, strnlen(value, len));
}

std::vector<std::string> CephClient::LockOwners(const std::string& image) {
  std::vector<std::string> out;
  rbd_image_t h = nullptr;
  if (OpenReadOnly(io_, image, &h) < 0) return {"<open failed>"};
  std::string tag(4096, '\0'), clients(4096, '\0'), cookies(4096, '\0'), addrs(4096, '\0');
  size_t tag_len = tag.size(), clients_len = clients.size(), cookies_len = cookies.size(), addrs_len = addrs.size();
  int exclusive = 0;
  ssize_t n = rbd_list_lockers(h, &exclusive, tag.data(), &tag_len, clients.data(), &clients_len, cookies.data(),
                               &cookies_len, addrs.data(), &addrs_len);
  rbd_close(h);
  if (n < 0) return {"<list lockers failed: " + std::to_string(n) + ">"};
  size_t start = 0;
  for (ssize_t i = 0; i < n && start < addrs_len; ++i) {
    std::string addr(addrs.data() + start);
    out.push_back(addr);
    start += addr.size() + 1;
  }
  return out;
}

std::vector<std::string> CephClient::Watchers(const std::string& image) {
  rbd_image_t h = nullptr;
  if (OpenReadOnly(io_, image, &h) < 0) return {"<open failed>"};
  std::vector<std::string> out = WatchersOf(h);
  rbd_close(h);
  return out;
}

int CephClient::SnapCount(const std::string& image) {
  rbd_image_t h = nullptr;
  if (OpenReadOnly(io_, image, &h) < 0) return -1;
  rbd_snap_info_t snaps[32];
  int max = 32;
  int n = rbd_snap_list(h, snaps, &max);
  if (n >= 0) rbd_snap_list_end(snaps);
  rbd_close(h);
  return n;
}

std::string CephClient::MonCommand(const std::string& cmd) {
  const char* cmds[] = {cmd.c_str()};
  char* out = nullptr;
  size_t out_len = 0;
  char* st = nullptr;
  size_t st_len = 0;
  int r = rados_mon_command(cluster_, cmds, 1, "", 0, &out, &out_len, &st, &st_len);
  std::string result = r < 0 ? "" : std::string(out != nullptr ? out : "", out_len);
  last_mon_status_ = std::to_string(r) + " " + std::string(st != nullptr ? st : "", st_len) + " out: " + result;
  rados_buffer_free(out);
  rados_buffer_free(st);
  return result;
}

std::set<std::string> CephClient::Blocklist() {
  std::set<std::string> out;
  // Pacific prints two arrays back to back (addresses, then ranges): read
  // the first value only.
  std::istringstream in(MonCommand(R"({"prefix":"osd blocklist ls","format":"json"})"));
  // "The fence is gone" must not pass because the mon did not answer.
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "osd blocklist ls: no JSON (" << e.what() << "): " << last_mon_status_;
    return out;
  }
  if (!j.is_array()) {
    ADD_FAILURE() << "osd blocklist ls: not an array: " << last_mon_status_;
    return out;
  }
  for (const auto& e : j) out.insert(e.value("addr", ""));
  return out;
}

}  // namespace blockcsi::testing
