#pragma once
// Random numbers from the kernel (getrandom). std::random_device costs ~17 us per object on the
// test machine (it probes the CPU and opens a device); a launch made several.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddprun {

// Fills `out` with `size` random bytes. Throws Error if the kernel refuses (it blocks only
// before its pool is first initialized, early at boot).
void random_bytes(void* out, std::size_t size);
std::uint64_t random_u64();
// `bytes` random bytes as 2 * bytes lowercase hex digits.
std::string random_hex(std::size_t bytes);

}  // namespace ddprun
