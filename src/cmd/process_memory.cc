#include "cmd/process_memory.h"

#include <malloc.h>

#include <cstdlib>

namespace blockcsi {

void TunePluginMemory() {
  // An operator's MALLOC_ARENA_MAX / MALLOC_TRIM_THRESHOLD_ in the
  // environment are read by glibc before main(); these calls override them,
  // so they are the plugin's defaults only when the environment names none.
  if (::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 2);
  if (::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) ::mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}

}  // namespace blockcsi
