#pragma once
// Static rendezvous over the store: a fixed number of nodes, each with the node rank it was
// given. Every node claims its rank (a duplicate is reported, not a hang), checks that all nodes
// agree on the node count, publishes its worker count, and waits for the others until the join
// timeout. Ranks are then assigned from what every node published.

#include <string>
#include <vector>

#include "agent/rank_assignment.hpp"
#include "rendezvous/store.hpp"

namespace ddprun {

struct NodeInfo {
  std::string host;
  int local_world_size = 0;
  int pid = 0;
};

struct RendezvousResult {
  NodeRanks ranks;
  std::vector<NodeInfo> nodes;  // by group rank
};

struct StaticRendezvousOptions {
  int nnodes = 1;
  int node_rank = 0;
  NodeInfo self;
  std::chrono::milliseconds join_timeout{600'000};
  std::string token;  // claims the node rank; unique per agent (see make_claim_token)
};

// A token unique to this agent, for claiming its node rank.
std::string make_claim_token(const NodeInfo& self);
// The key holding the claim on a node rank.
std::string owner_key(int node_rank);

// Throws RendezvousError (duplicate rank, mismatched node counts), TimeoutError naming the
// missing node ranks, or the store's ConnectionError / InterruptedError.
RendezvousResult static_rendezvous(Store& store, const StaticRendezvousOptions& options);

}  // namespace ddprun
