// attach_tool: a stand-in for the node plugin in the attach integration
// tests. `attach_tool bridge ...` is the bridge mode (what `blockcsi bridge`
// runs); `attach_tool attach ...` attaches one volume through the real
// VolumeAttacher and then holds (like a plugin with a staged volume) or
// crashes on purpose at a named step, so tests can kill -9 "the plugin".
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <map>
#include <string>
#include <string_view>

#include <filesystem>
#include "attach/attach_record_store.h"
#include "attach/attacher_factory.h"
#include "attach/initiator.h"
#include "common/logging.h"

namespace {

int Attach(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  blockcsi::AttacherOptions options;
  options.connector = "userspace";
  options.state_dir = flags["--state-dir"];
  options.node_id = flags["--node-id"];
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
  if (argc > 1 && std::string_view(argv[1]) == "attach") {
    blockcsi::InitLogging("attach_tool", blockcsi::LogFormat::kText, blockcsi::LogLevel::kInfo);
    return Attach(argc, argv);
  }
  std::cerr << "usage: attach_tool bridge ... | attach --state-dir D --node-id N --volume V --portals P "
               "--target T --lun L --serial S [--hold true] [--crash-at STEP]\n";
  return 2;
}
