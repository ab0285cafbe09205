#pragma once
// Tree fan-out for many hosts: the command reaches only the first level; each agent there starts
// the agents of its own subtree, the way Open MPI's daemons do, so that no process holds more
// than `width` remote-shell connections. Pure planning over the host list; the agents carry it
// out (cluster/subtree_relay.hpp).

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun {

struct TreeEntry {
  int node = 0;                   // node rank
  std::string host;
  std::vector<std::string> argv;  // the remote shell's command line that starts this host's agent
  std::vector<std::string> args;  // the agent's own arguments, sent in its hello
  std::vector<TreeEntry> subtree; // hosts this host's agent starts

  bool operator==(const TreeEntry&) const = default;
};

// Up to `width` entries start everything directly (flat); more are split into `width`
// contiguous groups of nearly equal size, whose first host starts the rest of its group, split
// the same way. Every host appears exactly once; the depth is about log_width(N).
std::vector<TreeEntry> plan_tree(std::vector<TreeEntry> hosts, int width);

// Calls `fn` for every host below `entry` (its subtree, and theirs), depth first.
void for_each_below(const TreeEntry& entry, const std::function<void(const TreeEntry&)>& fn);

// The number of hosts in the entries and all their subtrees.
std::size_t tree_size(const std::vector<TreeEntry>& entries);

nlohmann::json tree_to_json(const std::vector<TreeEntry>& entries);
// Throws Error for a malformed tree.
std::vector<TreeEntry> tree_from_json(const nlohmann::json& json);

}  // namespace ddprun
