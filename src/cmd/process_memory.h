// Process-wide memory settings of the plugin (issue #18). Not thread-safe:
// TunePluginMemory first thing in main() before any thread exists,
// ReleaseStartupPages once the plugin serves.
#pragma once

namespace blockcsi {

// glibc malloc: at most two arenas (one per core would give each of the
// gRPC and attach threads an arena of its own that is never handed back:
// tens of MiB after a burst of concurrent NodeStage calls, for calls that
// allocate little), and free memory at the top of the heap returned to the
// kernel past 128 KiB instead of a threshold that grows with each large
// free. The plugin's calls wait on programs and disks, not on malloc.
void TunePluginMemory();

// Unmaps from this process the read-only, never-written file pages of the
// program and its libraries (code and constants, not relocated data), and
// hands free heap pages back. Why: start-up (flags, gRPC and protobuf
// initialisation, the services' wiring) runs code spread over the whole
// program, and each page it touched stays in the RSS, with the 64 KiB the
// kernel maps around each fault, although most of it never runs again. The
// pages stay in the page cache: what a later call runs is mapped again by
// a minor fault. Pages that were written (relocations, RELRO, data) are left
// alone: dropping them would lose their contents.
void ReleaseStartupPages();

}  // namespace blockcsi
