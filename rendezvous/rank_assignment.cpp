#include "rendezvous/rank_assignment.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun {

std::string ranks_text(const NodeRanks& r) {
  const int last = r.base_rank + r.local_world_size - 1;
  return r.local_world_size == 1 ? fmt::format("{} of {}", r.base_rank, r.world_size)
                                 : fmt::format("{}..{} of {}", r.base_rank, last, r.world_size);
}

std::vector<NodeRanks> assign_all_ranks(const std::vector<int>& local_sizes) {
  const int nodes = static_cast<int>(local_sizes.size());
  std::vector<NodeRanks> out(local_sizes.size());
  int world_size = 0;
  for (int g = 0; g < nodes; ++g) {
    const int size = local_sizes[static_cast<std::size_t>(g)];
    if (size <= 0) {
      throw ConfigError(fmt::format("node {} published {} workers; expected at least 1", g, size));
    }
    auto& r = out[static_cast<std::size_t>(g)];
    r.group_rank = g;
    r.group_world_size = nodes;
    r.local_world_size = size;
    r.base_rank = world_size;
    world_size += size;
  }
  for (auto& r : out) r.world_size = world_size;
  return out;
}

NodeRanks assign_ranks(const std::vector<int>& local_sizes, int group_rank) {
  const int nodes = static_cast<int>(local_sizes.size());
  if (group_rank < 0 || group_rank >= nodes) {
    throw ConfigError(fmt::format("node rank {} is outside 0..{}", group_rank, nodes - 1));
  }
  return assign_all_ranks(local_sizes)[static_cast<std::size_t>(group_rank)];
}

}  // namespace ddprun
