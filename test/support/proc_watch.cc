#include "support/proc_watch.h"

#include <cctype>
#include <filesystem>
#include <utility>

#include "support/test_util.h"

namespace blockcsi::testing {

ProcSecretWatch::ProcSecretWatch(std::vector<std::string> secrets,
                                 std::function<void(const std::string& proc_dir)> each_process)
    : secrets_(std::move(secrets)), each_process_(std::move(each_process)), thread_([this] { Loop(); }) {}

ProcSecretWatch::~ProcSecretWatch() { Stop(); }

void ProcSecretWatch::Stop() {
  done_ = true;
  if (thread_.joinable()) thread_.join();
}

void ProcSecretWatch::Loop() {
  while (!done_) {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string pid = e.path().filename();
      if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
      for (const char* f : {"/cmdline", "/environ"}) {
        std::string text = ReadFileOrEmpty(e.path().string() + f);
        for (const auto& secret : secrets_) {
          if (text.find(secret) != std::string::npos) {
            ++sightings_;
            break;
          }
        }
      }
      if (each_process_) each_process_(e.path().string());
    }
    ++scans_;
  }
}

}  // namespace blockcsi::testing
