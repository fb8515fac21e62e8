// attach_tool: a stand-in for the node plugin in the attach integration
// tests (its bridges are this build's blockcsi-bridge, found in build/bin).
// `attach_tool attach ...` attaches one volume through the real
// VolumeAttacher and then holds (like a plugin with a staged volume) or
// crashes on purpose at a named step, so tests can kill -9 "the plugin".
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <string>
#include <string_view>

#include <filesystem>
#include "attach/attach_record_store.h"
#include "attach/attacher_factory.h"
#include "common/logging.h"
#include "contract/initiator.h"

namespace {

// The attach verb's flags; every one takes a value ("--hold true").
const char* const kAttachFlags[] = {"--state-dir", "--node-id", "--volume", "--portals", "--target",
                                    "--lun",       "--serial",  "--wwn",    "--hold",    "--crash-at"};

int Attach(std::map<std::string, std::string> flags) {
  blockcsi::AttacherOptions options;
  options.connector = "userspace";
  options.state_dir = flags["--state-dir"];
  options.node_id = flags["--node-id"];
  options.host_fs = blockcsi::MachineHost();
  options.state_files = blockcsi::MachineHost();
  // attach_tool lives in build/tests, the bridge programs in build/bin.
  std::error_code ec;
  options.bridge_dir =
      (std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "bin").string();
  std::string crash_at = flags["--crash-at"];
  if (!crash_at.empty()) {
    options.fault_hook = [crash_at](std::string_view point) {
      if (point == crash_at) ::raise(SIGKILL);
      return blockcsi::OkStatus();
    };
  }
  auto attacher = blockcsi::MakeVolumeAttacher(options);
  if (!attacher.ok()) {
    std::cout << "error " << attacher.status().ToString() << std::endl;
    return 1;
  }
  std::map<std::string, std::string> context = {{"portals", flags["--portals"]},
                                                {"targetIqn", flags["--target"]},
                                                {"lun", flags["--lun"]},
                                                {"serial", flags["--serial"]},
                                                {"wwn", flags["--wwn"]}};
  std::map<std::string, std::string> secrets;
  if (const char* user = std::getenv("ATTACH_TOOL_CHAP_USER")) secrets["chap-username"] = user;
  if (const char* pw = std::getenv("ATTACH_TOOL_CHAP_PASSWORD")) secrets["chap-password"] = pw;
  auto spec =
      blockcsi::ParseAttachSpec(flags["--volume"], context, secrets, blockcsi::InitiatorIqnForNode(options.node_id));
  if (!spec.ok()) {
    std::cout << "error " << spec.status().ToString() << std::endl;
    return 1;
  }
  auto record = (*attacher)->Attach(*spec);
  if (!record.ok()) {
    std::cout << "error " << record.status().ToString() << std::endl;
    return 1;
  }
  std::cout << "attached " << record->device_path << std::endl;
  if (flags["--hold"] == "true") {
    while (true) ::pause();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"attach_tool: a stand-in node plugin for the attach integration tests", "attach_tool"};
  app.require_subcommand(1);
  CLI::App* attach = app.add_subcommand("attach", "attach one volume, then exit, hold or crash at --crash-at");
  std::map<std::string, std::string> flags;
  for (const char* flag : kAttachFlags) attach->add_option(flag, flags[flag]);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  blockcsi::InitLogging("attach_tool", blockcsi::LogFormat::kText, blockcsi::LogLevel::kInfo);
  return Attach(std::move(flags));
}
