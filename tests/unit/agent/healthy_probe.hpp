#pragma once
// A node as --node-check's probe sees a healthy one, for the unit tests of its rules and its
// table to change one figure at a time.

#include <cstdint>
#include <string>

#include "agent/node_check.hpp"

namespace ddprun::test {

inline constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

inline NodeProbe healthy(int node) {
  NodeProbe p;
  p.node = node;
  p.host = "host" + std::to_string(node);
  p.dirs = {{kLogDirectory, "/logs", "", 50 * kGiB}, {kProgramDirectory, "/job", "", 50 * kGiB}};
  p.has_shm = true;
  p.shm_size_bytes = p.shm_free_bytes = 16 * kGiB;
  p.open_files = 65536;
  p.locked_bytes = kUnlimited;
  p.processes = 100000;
  return p;
}

}  // namespace ddprun::test
