// Transitional names for src/bridge, whose owner switches it to common/host.h
// (class Host, MakeRootedHost) on their branch; nothing else includes this.
#pragma once

#include <memory>
#include <string>

#include "common/host.h"

namespace blockcsi {

using Filesystem = Host;

inline std::unique_ptr<Host> MakeRootedFilesystem(std::string root) { return MakeRootedHost(std::move(root)); }

}  // namespace blockcsi
