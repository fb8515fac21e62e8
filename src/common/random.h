// Unguessable random numbers from the kernel's CSPRNG, for ids and the
// names of temp files and scratch directories.
#pragma once

#include <cstdint>

namespace blockcsi {

// 64 bits from getrandom(2). Not std::random_device: constructing one costs
// ~22 us in a VM (it asks cpuid which source to use, a trap to the
// hypervisor), against 0.3 us for getrandom, and every record write and new
// id made one.
uint64_t RandomU64();

}  // namespace blockcsi
