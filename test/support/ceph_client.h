// A librados/librbd client of the test's own, to look at (or act on) the
// cluster beside the code under test: a "node" writing to an image, or an
// admin checking what the plugin left (metadata, locks, watchers, snapshots,
// the OSD blocklist). Shared by the RBD integration and conformance suites.
// Not thread-safe: one per thread.
#pragma once

#include <rados/librados.h>
#include <rbd/librbd.h>

#include <cerrno>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace blockcsi::testing {

class CephClient {
 public:
  // Connects as client.<user> with `keyring`, with bounded OSD and mon
  // timeouts (a fenced client must see its writes fail, not hang the test).
  CephClient(const std::string& conf, const std::string& user, const std::string& keyring, const std::string& pool);
  ~CephClient();
  CephClient(const CephClient&) = delete;
  CephClient& operator=(const CephClient&) = delete;

  // 0 once connected and the pool opened, else the negative errno.
  int error() const { return error_; }
  rados_t cluster() const { return cluster_; }

  // One image opened read-write for Write/Read/Watchers().
  int OpenImage(const std::string& image);
  void CloseImage();
  // Writes and flushes, so an error of the OSDs (a fence) is seen here.
  int Write(uint64_t offset, const std::string& data);
  std::string Read(uint64_t offset, size_t len);
  std::vector<std::string> Watchers();  // of the open image
  // Sets a metadata key of the open image (as a node's bridge registers its
  // client); 0 or the negative errno.
  int SetMetadata(const std::string& key, const std::string& value);

  // Read-only looks at any image of the pool.
  // nullopt when the key is absent; "<open failed>" when the image cannot
  // be opened (never mistaken for "absent").
  std::optional<std::string> Metadata(const std::string& image, const std::string& key);
  // Addresses of the clients holding a lock on the image (the exclusive lock
  // is a managed lock, listed like any other).
  std::vector<std::string> LockOwners(const std::string& image);
  std::vector<std::string> Watchers(const std::string& image);
  int SnapCount(const std::string& image);  // -1 when it cannot be opened

  // The mon's answer ("" on error; last_mon_status() says why).
  std::string MonCommand(const std::string& cmd);
  const std::string& last_mon_status() const { return last_mon_status_; }
  // `osd blocklist ls`; an unreadable answer is a test failure (ADD_FAILURE),
  // never an empty list.
  std::set<std::string> Blocklist();

 private:
  rados_t cluster_ = nullptr;
  rados_ioctx_t io_ = nullptr;
  rbd_image_t image_ = nullptr;
  int error_ = -ENOTCONN;
  std::string last_mon_status_;
};

}  // namespace blockcsi::testing
