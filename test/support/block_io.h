// Data checks on block devices and files for the attach, RBD, restart and
// e2e tests: a deterministic pattern, O_DIRECT writes and reads (so the
// bytes cross the device, not the page cache) and plain reads of a backing
// file. Stateless; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace blockcsi::testing {

// `len` bytes that differ by seed and from one 512-byte sector to the next,
// so a misplaced or repeated sector shows.
std::string Pattern(size_t len, char seed);

// O_DIRECT write of `data` at `offset`, then fsync: 0, or the errno of the
// step that failed (EIO for a short write). `data.size()` must be a
// multiple of the device's logical block size.
int WriteDirect(const std::string& path, uint64_t offset, const std::string& data);

// O_DIRECT read of up to `len` bytes at `offset` (fewer at the end of the
// device): the bytes, or "" when the open or a read failed, with the reason
// in *error when given ("" on success).
std::string ReadDirect(const std::string& path, uint64_t offset, size_t len, std::string* error = nullptr);

// Writes a whole file (created or truncated), fsyncs it and its directory,
// as a database does before it reports a commit: 0, or the errno of the
// step that failed.
int WriteFileSynced(const std::string& path, const std::string& data);

// A plain (cached) read of a backing file: the bytes, "" on failure.
std::string ReadFileAt(const std::string& path, uint64_t offset, size_t len);

}  // namespace blockcsi::testing
