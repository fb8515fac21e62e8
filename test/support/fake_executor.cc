#include "support/fake_executor.h"

#include <gtest/gtest.h>

namespace blockcsi::testing {
namespace {

std::string Render(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

}  // namespace

FakeExecutor& FakeExecutor::Expect(std::vector<std::string> argv, CommandResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  expected_.push_back({std::move(argv), std::move(result), OkStatus(), nullptr});
  return *this;
}

FakeExecutor& FakeExecutor::ExpectOk(std::vector<std::string> argv, std::string stdout_text) {
  CommandResult r;
  r.exit_code = 0;
  r.stdout_text = std::move(stdout_text);
  return Expect(std::move(argv), std::move(r));
}

FakeExecutor& FakeExecutor::ExpectFail(std::vector<std::string> argv, int exit_code, std::string stderr_text) {
  CommandResult r;
  r.exit_code = exit_code;
  r.stderr_text = std::move(stderr_text);
  return Expect(std::move(argv), std::move(r));
}

FakeExecutor& FakeExecutor::ExpectError(std::vector<std::string> argv, Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  expected_.push_back({std::move(argv), CommandResult{}, std::move(status), nullptr});
  return *this;
}

FakeExecutor& FakeExecutor::Then(std::function<void()> action) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!expected_.empty()) expected_.back().action = std::move(action);
  return *this;
}

FakeExecutor& FakeExecutor::InAnyOrder() {
  std::lock_guard<std::mutex> lock(mu_);
  any_order_ = true;
  return *this;
}

bool FakeExecutor::Matches(const Expectation& want, const Command& command, std::string* why) const {
  const auto& args = command.args();
  if (want.argv.size() != args.size()) return false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string w = want.argv[i];
    bool must_be_secret = w.rfind(kSecretMark, 0) == 0;
    if (must_be_secret) w = w.substr(sizeof(kSecretMark) - 1);
    if (w != args[i].value) return false;
    if (must_be_secret && !args[i].sensitive) {
      *why = " (argument " + std::to_string(i) + " must be passed as a secret)";
      return false;
    }
  }
  return true;
}

StatusOr<CommandResult> FakeExecutor::Run(const Command& command) {
  std::function<void()> action;
  StatusOr<CommandResult> out = Internal("FakeExecutor: unexpected command " + command.Redacted());
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(command.Redacted());
    used_.resize(expected_.size(), false);
    size_t first_unused = expected_.size();
    for (size_t i = 0; i < expected_.size(); ++i) {
      if (!used_[i]) {
        first_unused = i;
        break;
      }
    }
    if (first_unused == expected_.size()) {
      ADD_FAILURE() << "FakeExecutor: unexpected command (no more expected): " << command.Redacted();
      return out;
    }
    std::string why;
    size_t hit = expected_.size();
    for (size_t i = first_unused; i < expected_.size(); ++i) {
      if (used_[i]) continue;
      if (Matches(expected_[i], command, &why)) {
        hit = i;
        break;
      }
      if (!any_order_) break;
    }
    if (hit == expected_.size()) {
      std::vector<std::string> shown;
      for (auto w : expected_[first_unused].argv) {
        if (w.rfind(kSecretMark, 0) == 0) w = "<secret>" + w.substr(sizeof(kSecretMark) - 1);
        shown.push_back(w);
      }
      ADD_FAILURE() << "FakeExecutor: command #" << log_.size() - 1 << " differs" << why
                    << "\n  expected: " << Render(shown) << "\n  actual:   " << command.Redacted();
      return out;
    }
    used_[hit] = true;
    action = expected_[hit].action;
    if (!expected_[hit].status.ok()) {
      out = expected_[hit].status;
    } else {
      out = expected_[hit].result;
    }
  }
  // Outside the lock: the action may take time (copying a sysfs tree).
  if (action) action();
  return out;
}

std::vector<std::string> FakeExecutor::Pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (size_t i = 0; i < expected_.size(); ++i) {
    if (i >= used_.size() || !used_[i]) out.push_back(Render(expected_[i].argv));
  }
  return out;
}

std::vector<std::string> FakeExecutor::RedactedLog() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

}  // namespace blockcsi::testing
