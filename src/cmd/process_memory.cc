#include "cmd/process_memory.h"

#include <link.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace blockcsi {
namespace {

struct PageRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
};

// True when the object's text was written by its relocations (DT_TEXTREL):
// its code pages then hold more than the file does.
bool HasTextRelocations(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_DYNAMIC) continue;
    // The loader hands out addresses as integers.
    const auto* dyn =
        reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + ph.p_vaddr);  // NOLINT(performance-no-int-to-ptr)
    for (const auto* d = dyn; d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL) != 0)) return true;
    }
  }
  return false;
}

// dl_iterate_phdr callback: appends the whole pages of each loaded segment
// that was never writable and shares no page with one that was.
int CollectReadOnlyPages(dl_phdr_info* info, size_t, void* data) {
  // The program itself ("") and libraries loaded from a file; not the vDSO.
  if (info->dlpi_name == nullptr || (info->dlpi_name[0] != '\0' && info->dlpi_name[0] != '/')) return 0;
  if (HasTextRelocations(info)) return 0;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<PageRange> written;
  std::vector<PageRange> pristine;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    uintptr_t end = begin + ph.p_memsz;
    if (ph.p_type == PT_GNU_RELRO || (ph.p_type == PT_LOAD && (ph.p_flags & PF_W) != 0)) {
      written.push_back({begin & ~(page - 1), (end + page - 1) & ~(page - 1)});
    } else if (ph.p_type == PT_LOAD) {
      pristine.push_back({(begin + page - 1) & ~(page - 1), end & ~(page - 1)});
    }
  }
  auto* out = static_cast<std::vector<PageRange>*>(data);
  for (const PageRange& r : pristine) {
    bool overlaps = false;
    for (const PageRange& w : written) overlaps = overlaps || (r.begin < w.end && w.begin < r.end);
    if (!overlaps && r.begin < r.end) out->push_back(r);
  }
  return 0;
}

}  // namespace

void TunePluginMemory() {
  // An operator's MALLOC_ARENA_MAX / MALLOC_TRIM_THRESHOLD_ in the
  // environment are read by glibc before main(); these calls override them,
  // so they are the plugin's defaults only when the environment names none.
  if (::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 2);
  if (::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) ::mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}

void ReleaseStartupPages() {
  std::vector<PageRange> ranges;
  ::dl_iterate_phdr(CollectReadOnlyPages, &ranges);
  // MADV_DONTNEED on a private file mapping that was never written drops
  // only this process's page-table entries: the next access maps the same
  // file page again. A failure (e.g. locked memory) changes nothing.
  for (const PageRange& r : ranges) {
    ::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_DONTNEED);  // NOLINT(performance-no-int-to-ptr)
  }
  ::malloc_trim(0);
}

}  // namespace blockcsi
