#pragma once
// Random numbers from the kernel (getrandom): the project's one source of them, for secrets,
// nonces, tokens and names. Not std::random_device: each object probes the CPU and opens a
// device, a cost a launch would pay several times.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddprun {

// Fills `out` with `size` random bytes. Throws Error if the kernel refuses (it blocks only
// before its pool is first initialized, early at boot).
void random_bytes(void* out, std::size_t size);
// `size` random bytes.
std::string random_bytes(std::size_t size);
std::uint64_t random_u64();
// `bytes` random bytes as 2 * bytes lowercase hex digits.
std::string random_hex(std::size_t bytes);

}  // namespace ddprun
