// FakeExecutor: an Executor for unit tests that expects an exact sequence of
// argv and replays canned results (often captured program output kept
// under test/testdata). Anything unexpected — another program, another
// argument, one call too many — fails the running test loudly and returns
// INTERNAL. An expected argument written as Secret("x") must also be
// marked sensitive by the code under test. Thread-safe.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/executor.h"

namespace blockcsi::testing {

class FakeExecutor final : public Executor {
 public:
  // Marks an expected argument as one that must be passed with Command::Secret.
  static std::string Secret(const std::string& value) { return kSecretMark + value; }

  // Queues the next expected command and its result.
  FakeExecutor& Expect(std::vector<std::string> argv, CommandResult result);
  FakeExecutor& ExpectOk(std::vector<std::string> argv, std::string stdout_text = "");
  FakeExecutor& ExpectFail(std::vector<std::string> argv, int exit_code, std::string stderr_text);
  // The program could not run at all (Run returns `status`).
  FakeExecutor& ExpectError(std::vector<std::string> argv, Status status);

  // Matches each command against every expectation not yet used instead of
  // only the next one: for code that runs commands from several threads.
  // Each expectation is still used exactly once.
  FakeExecutor& InAnyOrder();

  // Runs `action` when the most recently queued expectation is matched,
  // before its result is returned (e.g. the "kernel" creating a session in a
  // fake sysfs tree when the login command runs).
  FakeExecutor& Then(std::function<void()> action);

  StatusOr<CommandResult> Run(const Command& command) override;

  // Expectations not yet consumed, rendered for a failure message.
  std::vector<std::string> Pending() const;
  // Every command run so far, as Command::Redacted() shows it (what a log sees).
  std::vector<std::string> RedactedLog() const;

 private:
  static constexpr char kSecretMark[] = "\x01secret:";
  struct Expectation {
    std::vector<std::string> argv;
    CommandResult result;
    Status status;
    std::function<void()> action;
  };
  mutable std::mutex mu_;
  bool Matches(const Expectation& want, const Command& command, std::string* why) const;

  std::vector<Expectation> expected_;  // guarded by mu_
  std::vector<bool> used_;             // guarded by mu_
  bool any_order_ = false;             // guarded by mu_
  std::vector<std::string> log_;       // guarded by mu_
};

}  // namespace blockcsi::testing
