// blockctl's verbs: each is a small unit that registers itself with the
// registry below; shared options (state dir, endpoint, -o) live in one place.
// Verbs run once per process; nothing here is shared between threads.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "common/host.h"

namespace CLI {
class App;
}

namespace blockcsi::cli {

enum class OutputFormat { kTable, kJson };

// Exit codes scripts can rely on.
inline constexpr int kExitOk = 0;
inline constexpr int kExitProblems = 1;  // the command ran and found something wrong
inline constexpr int kExitUsage = 2;

struct GlobalOptions {
  std::string state_dir = "/var/lib/blockcsi";
  std::string endpoint = "unix:///var/lib/kubelet/plugins/blockcsi.io/csi.sock";
  std::string output = "table";
  // The machine's files and processes, as the program's main hands them in.
  std::shared_ptr<Host> host;
  OutputFormat format() const { return output == "json" ? OutputFormat::kJson : OutputFormat::kTable; }
};

// Where a verb writes: data to `out`, diagnostics to `err` (already prefixed
// "blockctl: " by Error()).
struct Io {
  std::ostream& out;
  std::ostream& err;
  void Error(const std::string& message) const;
};

class Verb {
 public:
  virtual ~Verb() = default;
  virtual std::string Name() const = 0;
  virtual std::string Summary() const = 0;
  // Declares the verb's own flags and positionals on its subcommand.
  virtual void Configure(CLI::App& command) = 0;
  virtual int Run(const GlobalOptions& options, const Io& io) = 0;
};

using VerbFactory = std::function<std::unique_ptr<Verb>()>;

// Verbs add themselves at static-initialisation time (see REGISTER_VERB).
std::vector<VerbFactory>& VerbRegistry();
bool RegisterVerb(VerbFactory factory);

#define BLOCKCTL_REGISTER_VERB(Class) \
  static const bool Class##_registered = ::blockcsi::cli::RegisterVerb([] { return std::make_unique<Class>(); })

// The whole program, for main() and for golden tests; `host`: the machine.
int RunBlockctl(int argc, char** argv, std::ostream& out, std::ostream& err, std::shared_ptr<Host> host);

}  // namespace blockcsi::cli
