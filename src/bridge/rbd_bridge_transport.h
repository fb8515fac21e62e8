// The bridge's RBD transport: one image through librbd, on a rados
// connection of its own. One connection per attachment is deliberate: the
// controller fences a node by blocklisting client instances, so a shared
// connection would cut every volume of the node at once. librbd handles are
// thread-safe; so is this class.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "bridge/bridge_transport.h"
#include "common/mutex.h"

namespace blockcsi {

struct RbdTransportOptions {
  std::string volume_id;  // for messages
  std::string pool;
  std::string image;
  std::string image_id;  // the published identity; another id → FAILED_PRECONDITION
  // mon_host syntax; empty: read `ceph_conf` (the node's ceph.conf).
  std::string monitors;
  std::string ceph_conf = "/etc/ceph/ceph.conf";
  std::string user = "admin";  // cephx id without "client."
  // cephx key (secret; kept only inside librados). Empty: the keyring that
  // librados finds through ceph_conf or its defaults.
  std::string key;
  // Written to image metadata blockcsi.client.<node_id> with this client's
  // address(es), so that the controller knows whom to fence.
  std::string node_id;
  bool read_only = false;
  // Mon/OSD op and mount timeout: no librados call waits longer.
  std::chrono::seconds io_timeout{30};
  // How often an idle attachment asks the OSDs whether it was fenced, so the
  // condition shows before the next write fails. Zero: never.
  std::chrono::milliseconds probe_interval{std::chrono::seconds(5)};
};

// The metadata key the controller's RbdBackend reads (rbd_backend.h).
std::string RbdClientMetadataKey(const std::string& node_id);

// What a blocklisted client is told, in the status reply and VolumeCondition.
inline constexpr char kRbdFencedMessage[] =
    "client was blocklisted (fenced) by the controller: this node lost the volume's attachment";

class RbdBridgeTransport final : public BridgeTransport {
 public:
  // Connects, opens the image (read-only for read-only attachments),
  // verifies its id, and for a writable attachment takes the exclusive lock
  // and records this client's addresses. UNAVAILABLE: cluster unreachable;
  // PERMISSION_DENIED: cephx refused; NOT_FOUND: pool or image gone;
  // FAILED_PRECONDITION: another image id, or another client holds the
  // lock. Every message names the volume; on error nothing is left behind.
  static StatusOr<std::unique_ptr<RbdBridgeTransport>> Open(const RbdTransportOptions& options);
  ~RbdBridgeTransport() override;
  RbdBridgeTransport(const RbdBridgeTransport&) = delete;
  RbdBridgeTransport& operator=(const RbdBridgeTransport&) = delete;

  std::string name() const override { return "rbd"; }
  std::string location() const override { return options_.pool + "/" + options_.image; }
  uint32_t block_size() const override { return 512; }
  uint64_t size_bytes() const override { return size_.load(); }
  Status Read(uint64_t offset, size_t length, char* out) override;
  Status Write(uint64_t offset, size_t length, const char* in) override;
  Status Flush() override;
  // librbd aio: many requests in flight; completions run on librbd's
  // finisher thread.
  void ReadAsync(uint64_t offset, size_t length, char* out, Done done) override;
  void WriteAsync(uint64_t offset, size_t length, const char* in, Done done) override;
  void FlushAsync(Done done) override;
  // Every image can deallocate (objects are thin); a read-only attachment
  // never gets here (the bridge refuses first).
  bool can_punch_hole() const override { return !options_.read_only; }
  void PunchHoleAsync(uint64_t offset, uint64_t length, Done done) override;
  Status RefreshSize() override;
  StatusOr<LunIdentity> ReadIdentity() override;
  Status Health() const override;
  void Close() override;

  // This client's addresses as the controller sees them in watcher and
  // locker lists ("127.0.0.1:0/1234", comma separated).
  const std::string& client_addresses() const { return addrs_; }

 private:
  explicit RbdBridgeTransport(RbdTransportOptions o) : options_(std::move(o)) {}
  Status Connect();
  Status OpenImage();
  Status LockAndRegister();
  // The fence probe: a stat of the image's header object every
  // probe_interval; a blocklisted client gets -EBLOCKLISTED for it too.
  void ProbeLoop();
  // Turns a librados/librbd error into a Status naming the volume and
  // notes a fence (-EBLOCKLISTED) for Health().
  Status IoError(int r, const char* what);
  struct Aio;
  // Starts `aio` with `start` (an rbd_aio_* call given the completion); on
  // an error to start, completes it at once.
  void StartAio(Aio* aio, int (*start)(Aio*, void* completion));
  static void OnAioComplete(void* completion, void* arg);

  RbdTransportOptions options_;
  void* cluster_ = nullptr;  // rados_t
  void* io_ = nullptr;       // rados_ioctx_t
  void* image_ = nullptr;    // rbd_image_t
  std::string addrs_;
  bool registered_ = false;  // blockcsi.client.<node> written by us
  std::atomic<uint64_t> size_{0};
  std::atomic<bool> fenced_{false};
  Mutex close_mu_ ACQUIRED_BEFORE(probe_mu_);  // one Close at a time
  std::string header_object_;                  // rbd_header.<id>
  Mutex probe_mu_;
  CondVar probe_cv_;
  bool probe_stop_ GUARDED_BY(probe_mu_) = false;
  std::thread probe_thread_;
};

}  // namespace blockcsi
