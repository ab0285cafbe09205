#pragma once
// Rank assignment: a pure function over what every node published. Nodes may run different
// numbers of workers; global ranks are prefix sums of the local world sizes in node-rank order.

#include <string>
#include <vector>

namespace ddprun {

struct NodeRanks {
  int group_rank = 0;        // this node's rank among nodes (GROUP_RANK)
  int group_world_size = 1;  // number of nodes (GROUP_WORLD_SIZE)
  int local_world_size = 1;  // workers on this node (LOCAL_WORLD_SIZE)
  int base_rank = 0;         // global rank of this node's local rank 0
  int world_size = 1;        // workers in the whole job (WORLD_SIZE)

  int global_rank(int local_rank) const { return base_rank + local_rank; }
};

// "2 of 4" for one worker, "0..1 of 4" for several: the ranks as the summaries and plans show them.
std::string ranks_text(const NodeRanks& ranks);

// `local_sizes[g]` is node g's worker count. Throws ConfigError if a size is not positive.
std::vector<NodeRanks> assign_all_ranks(const std::vector<int>& local_sizes);

// One node's ranks. Throws ConfigError if `group_rank` is out of range or a size is not
// positive.
NodeRanks assign_ranks(const std::vector<int>& local_sizes, int group_rank);

}  // namespace ddprun
