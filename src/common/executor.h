// Executor: the only way our code runs another program. argv only, never a
// shell, never a $PATH lookup (a bare name is found in /usr/sbin, /usr/bin,
// /sbin, /bin only; anything else by absolute path); every command has a timeout after which the child (and its process
// group) is killed; arguments marked sensitive never appear in logs or error
// messages. Implementations must be thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace blockcsi {

struct CommandArg {
  std::string value;
  bool sensitive = false;
};

// Builds a command fluently: Command("tgtadm").Arg("--lld").Arg("iscsi").Secret(pw).
class Command {
 public:
  explicit Command(std::string program) { args_.push_back({std::move(program), false}); }
  Command(const Command&) = default;
  Command(Command&&) = default;
  Command& operator=(const Command&) = default;
  Command& operator=(Command&&) = default;
  // Sensitive values (a secret argument, a key on stdin) are wiped with the
  // command, so that a key is not left behind in freed memory.
  ~Command();

  Command& Arg(std::string value) {
    args_.push_back({std::move(value), false});
    return *this;
  }
  Command& Args(const std::vector<std::string>& values) {
    for (const auto& v : values) Arg(v);
    return *this;
  }
  // The value is passed to the program but shown as "***" everywhere else.
  Command& Secret(std::string value) {
    args_.push_back({std::move(value), true});
    return *this;
  }
  Command& Timeout(std::chrono::milliseconds t) {
    timeout_ = t;
    return *this;
  }
  Command& Stdin(std::string data, bool sensitive = false) {
    stdin_ = std::move(data);
    stdin_sensitive_ = sensitive;
    return *this;
  }
  Command& Env(std::string key, std::string value) {
    env_[std::move(key)] = std::move(value);
    return *this;
  }

  const std::vector<CommandArg>& args() const { return args_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& stdin_data() const { return stdin_; }
  bool stdin_sensitive() const { return stdin_sensitive_; }
  const std::map<std::string, std::string>& env() const { return env_; }

  // argv with sensitive values replaced by "***", space separated.
  std::string Redacted() const;
  std::vector<std::string> Argv() const;

 private:
  std::vector<CommandArg> args_;
  std::chrono::milliseconds timeout_{std::chrono::seconds(30)};
  std::string stdin_;
  bool stdin_sensitive_ = false;
  std::map<std::string, std::string> env_;
};

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;      // the signal that ended it, if any
  bool timed_out = false;
  std::string stdout_text;
  std::string stderr_text;
  bool ok() const { return exit_code == 0 && !timed_out; }
};

class Executor {
 public:
  virtual ~Executor() = default;
  // A non-OK status only when the program could not be run or timed out
  // (DEADLINE_EXCEEDED); a non-zero exit is reported in the result.
  virtual StatusOr<CommandResult> Run(const Command& command) = 0;
};

// The line of a program's output that says what went wrong, for an error
// message: the first non-blank line of `output` that is not a version
// banner ("mke2fs 1.47.0 (5-Feb-2023)") or a pointer to docs, with its
// indented continuation lines joined; nothing from a usage text on ("Usage:",
// "Try `... --help'"); at most 300 characters. Pure.
std::string FirstMeaningfulLine(std::string_view output);

// `text` with every sensitive argument value of `command` (and a sensitive
// stdin, whole and line by line) replaced by "***": a program may echo one
// back in its output.
std::string BlankSecrets(std::string text, const Command& command);

// The first meaningful line of a failed command's stderr, else its stdout,
// secrets blanked, for callers that word the rest of the message
// themselves. (The process executor logs a failed command's whole output at
// debug level.)
std::string FailureLine(const Command& command, const CommandResult& result);

// "`<redacted argv>` failed (exit code N): <FailureLine>".
std::string DescribeFailure(const Command& command, const CommandResult& result);

// Runs `command` and turns a non-zero exit into a status (code `on_failure`)
// whose message is DescribeFailure's.
StatusOr<CommandResult> RunChecked(Executor& executor, const Command& command,
                                   StatusCode on_failure = StatusCode::kInternal);

// The real thing: fork/exec with pipes, in a new process group.
std::unique_ptr<Executor> MakeProcessExecutor();

}  // namespace blockcsi
