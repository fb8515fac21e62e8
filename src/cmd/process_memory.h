// Process-wide memory settings of the plugin, applied first thing in main()
// before any thread exists. Not thread-safe: call once.
#pragma once

namespace blockcsi {

// glibc malloc: at most two arenas (one per core would give each of the
// gRPC and attach threads an arena of its own that is never handed back:
// tens of MiB after a burst of concurrent NodeStage calls, for calls that
// allocate little), and free memory at the top of the heap returned to the
// kernel past 128 KiB instead of a threshold that grows with each large
// free. The plugin's calls wait on programs and disks, not on malloc.
void TunePluginMemory();

}  // namespace blockcsi
