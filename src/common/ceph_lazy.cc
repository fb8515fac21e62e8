#include "common/ceph_lazy.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

namespace blockcsi {
namespace {

struct Loaded {
  void* rbd = nullptr;
  void* rados = nullptr;
  std::string error;
};

// RTLD_LOCAL: the Ceph symbols stay out of the global scope, so nothing
// else in the process binds to them by accident; they are reached only
// through the handles.
const Loaded& Load() {
  static const Loaded loaded = [] {
    Loaded l;
    for (auto [name, handle] : {std::pair{"librados.so.2", &l.rados}, std::pair{"librbd.so.1", &l.rbd}}) {
      *handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (*handle == nullptr) {
        const char* why = ::dlerror();
        l.error = std::string("cannot load ") + name + ": " + (why != nullptr ? why : "unknown error");
        break;
      }
    }
    return l;
  }();
  return loaded;
}

}  // namespace

Status LoadCephLibraries() {
  const Loaded& l = Load();
  if (!l.error.empty()) return FailedPrecondition(l.error + " (the Ceph client libraries are needed for RBD volumes)");
  return OkStatus();
}

void* CephSymbol(const char* name) {
  const Loaded& l = Load();
  void* symbol = nullptr;
  if (l.error.empty()) {
    symbol = ::dlsym(std::string_view(name).starts_with("rbd_") ? l.rbd : l.rados, name);
  }
  if (symbol == nullptr) {
    // A caller that skipped LoadCephLibraries(), or headers newer than the
    // library: there is no status to return from inside a C call.
    std::fprintf(stderr, "blockcsi: Ceph function %s unavailable: %s\n", name,
                 l.error.empty() ? "not in the loaded library" : l.error.c_str());
    std::abort();
  }
  return symbol;
}

}  // namespace blockcsi
