// The userspace bridge's small control protocol and file layout, shared by
// the bridge process (`blockcsi bridge`) and the plugin side that starts,
// adopts and stops it. One JSON object per line over a unix stream socket,
// one request per connection. Pure helpers plus a blocking client;
// thread-safe.
#pragma once

#include <sys/socket.h>

#include <array>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace blockcsi {

// <state-dir>/bridges/<escaped volume id>/{ctl.sock,fuse/lun}
struct BridgePaths {
  std::string dir;
  std::string control_socket;
  std::string mountpoint;
  std::string lun_file;  // the FUSE file the loop device sits on
};
BridgePaths BridgePathsFor(const std::string& state_dir, const std::string& volume_id);
std::string BridgesDir(const std::string& state_dir);

// A sockaddr_un for `path` even when it is longer than sun_path allows
// (kubelet state dirs plus long volume ids easily are): the directory is
// opened O_PATH and the address names it as /proc/self/fd/<fd>/<file>.
// Keep the object alive until bind/connect returned.
class UnixSocketAddress {
 public:
  explicit UnixSocketAddress(const std::string& path);
  ~UnixSocketAddress();
  UnixSocketAddress(const UnixSocketAddress&) = delete;
  UnixSocketAddress& operator=(const UnixSocketAddress&) = delete;
  const Status& status() const { return status_; }
  const ::sockaddr* addr() const;
  unsigned length() const;

 private:
  Status status_;
  int dir_fd_ = -1;
  std::string storage_;  // a sockaddr_un
};

// Upper bounds (seconds) of the latency buckets of the "io" object a status
// reply carries: {"read"|"write"|"flush"|"discard": {"ops","bytes","errors",
// "latency_seconds_sum","latency_bucket_counts":[per bucket, not
// cumulative; slower than the last bound: ops minus their sum]},
// "reconnects", "latency_buckets"}. 100 µs to 10 s.
inline constexpr std::array<double, 15> kIoLatencyBuckets{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                          0.05,   0.1,     0.25,   0.5,   1,      2.5,   10};

// Requests: {"op":"status"}, {"op":"status","refresh_identity":true},
// {"op":"rescan"}, {"op":"shutdown"}. Replies carry "ok" and, on failure,
// "code" (StatusCode) and "message".
StatusOr<nlohmann::json> CallBridge(const std::string& control_socket, const nlohmann::json& request,
                                    std::chrono::milliseconds timeout);

// A reply's error as a Status (OK when "ok" is true).
Status StatusFromReply(const nlohmann::json& reply);
nlohmann::json ReplyFromStatus(const Status& status);

}  // namespace blockcsi
