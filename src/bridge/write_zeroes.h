// Zeros written through a transport's ordinary writes, for fallocate
// ZERO_RANGE (the loop device's write-zeroes that must stay allocated) and
// for the partial granules at the ends of a punched hole. Thread-safe.
#pragma once

#include <cstdint>

#include "bridge/bridge_transport.h"

namespace blockcsi {

// Writes zeros to [offset, offset + length) (block-aligned) as writes of
// at most 1 MiB, all in flight at once; `done` runs once, after the last,
// with the first error. Each write is bounded by the transport's timeout,
// as any other write.
void WriteZeroesAsync(BridgeTransport& transport, uint64_t offset, uint64_t length, BridgeTransport::Done done);

}  // namespace blockcsi
