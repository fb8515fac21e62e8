// ProcSecretWatch: a thread that reads every process's /proc/<pid>/cmdline
// and environ, round after round until stopped, and counts where a secret
// shows (issue #21: no CHAP secret on a command line or in an environment,
// not even for a moment). Read its counts after Stop(). Not copyable.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace blockcsi::testing {

class ProcSecretWatch {
 public:
  // Starts watching for any of `secrets`. `each_process`, when given, also
  // sees every process's /proc/<pid> directory in every round (on the
  // watch's thread).
  explicit ProcSecretWatch(std::vector<std::string> secrets,
                           std::function<void(const std::string& proc_dir)> each_process = nullptr);
  ~ProcSecretWatch();
  ProcSecretWatch(const ProcSecretWatch&) = delete;
  ProcSecretWatch& operator=(const ProcSecretWatch&) = delete;

  // Lets the round in progress finish and joins.
  void Stop();
  // The cmdline or environ files, one process's in one round each, that
  // showed a secret.
  int sightings() const { return sightings_; }
  // The rounds completed over the whole of /proc.
  int scans() const { return scans_; }

 private:
  void Loop();

  const std::vector<std::string> secrets_;
  const std::function<void(const std::string&)> each_process_;
  std::atomic<bool> done_{false};
  std::atomic<int> sightings_{0};
  std::atomic<int> scans_{0};
  std::thread thread_;  // last: starts once the rest is initialised
};

}  // namespace blockcsi::testing
