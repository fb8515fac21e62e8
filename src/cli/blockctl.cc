#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/verb.h"
#include "common/version.h"

namespace blockcsi::cli {

void Io::Error(const std::string& message) const { err << "blockctl: " << message << "\n"; }

std::vector<VerbFactory>& VerbRegistry() {
  static std::vector<VerbFactory> registry;
  return registry;
}

bool RegisterVerb(VerbFactory factory) {
  VerbRegistry().push_back(std::move(factory));
  return true;
}

int RunBlockctl(int argc, char** argv, std::ostream& out, std::ostream& err, std::shared_ptr<Host> host) {
  CLI::App app{"blockctl: inspect and repair blockcsi volumes on this node", "blockctl"};
  app.require_subcommand(1);
  GlobalOptions options;
  options.host = std::move(host);
  app.add_option("--state-dir", options.state_dir, "The plugin's state directory")->capture_default_str();
  app.add_option("--endpoint", options.endpoint, "The plugin's CSI socket")->capture_default_str();
  app.add_option("-o,--output", options.output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.set_version_flag("--version", std::string("blockctl ") + std::string(BuildVersion()));

  std::vector<std::unique_ptr<Verb>> verbs;
  for (const auto& factory : VerbRegistry()) verbs.push_back(factory());
  std::sort(verbs.begin(), verbs.end(), [](const auto& a, const auto& b) { return a->Name() < b->Name(); });
  std::vector<std::pair<CLI::App*, Verb*>> commands;
  for (auto& verb : verbs) {
    CLI::App* command = app.add_subcommand(verb->Name(), verb->Summary());
    // Global options are accepted after the verb too ("blockctl volumes -o json").
    command->fallthrough();
    verb->Configure(*command);
    commands.emplace_back(command, verb.get());
  }
  Io io{out, err};
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    for (auto& [command, verb] : commands) {
      if (command->parsed()) {
        out << command->help();
        return kExitOk;
      }
    }
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    io.Error(e.what());
    err << "Run 'blockctl --help' for usage.\n";
    return kExitUsage;
  }
  for (auto& [command, verb] : commands) {
    if (command->parsed()) return verb->Run(options, io);
  }
  io.Error("no verb given");
  return kExitUsage;
}

}  // namespace blockcsi::cli
