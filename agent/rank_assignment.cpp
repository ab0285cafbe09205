#include "agent/rank_assignment.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun {

NodeRanks assign_ranks(const std::vector<int>& local_sizes, int group_rank) {
  const int nodes = static_cast<int>(local_sizes.size());
  if (group_rank < 0 || group_rank >= nodes) {
    throw ConfigError(fmt::format("node rank {} is outside 0..{}", group_rank, nodes - 1));
  }
  NodeRanks r;
  r.group_rank = group_rank;
  r.group_world_size = nodes;
  r.world_size = 0;
  for (int g = 0; g < nodes; ++g) {
    if (local_sizes[static_cast<std::size_t>(g)] <= 0) {
      throw ConfigError(fmt::format("node {} published {} workers; expected at least 1", g,
                                    local_sizes[static_cast<std::size_t>(g)]));
    }
    if (g == group_rank) r.base_rank = r.world_size;
    r.world_size += local_sizes[static_cast<std::size_t>(g)];
  }
  r.local_world_size = local_sizes[static_cast<std::size_t>(group_rank)];
  return r;
}

}  // namespace ddprun
