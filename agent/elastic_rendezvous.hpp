#pragma once
// Elastic rendezvous (--rdzv-backend=c10d, --nnodes=MIN:MAX) over the store, in rounds.
//
// A node takes a join slot in the current round with one atomic add and publishes its
// descriptor under that slot. The MAX-th joiner closes the round at once; once MIN have joined,
// every joiner from the MIN-th on waits out the last-call window and then closes the round
// (compare_set: the first closer wins). The closer assigns ranks to the slots that published a
// descriptor (a joiner that died half-way is left out) and writes each its assignment. Later
// joiners are too late for this round. Total traffic is O(n): one add and one set per node,
// one multi_get and one multi_set by the closer, two small reads per node, and server-side
// waits.
//
// Group ranks are deterministic: nodes that were members of the previous round keep their
// relative order, newcomers follow in join order.
//
// Keys (in the run id's namespace): "round" (the current round number), and per round r:
// "r/<r>/join" (counter), "r/<r>/node/<slot>" (descriptor), "r/<r>/closing" (the closer),
// "r/<r>/assign/<slot>" (a member's group rank and base rank), "r/<r>/closed" (member count,
// world size, restart count, master host: JSON).

#include <string>
#include <vector>

#include "agent/rank_assignment.hpp"
#include "common/deadline.hpp"
#include "rendezvous/store.hpp"

namespace ddprun {

struct ElasticNode {
  std::string id;    // unique per agent: host, pid and a random tag
  std::string host;  // the address other nodes reach this node at
  int nproc = 1;
  int prev_rank = -1;  // group rank in the last round this node was a member of
  int failures = 0;    // worker-failure restarts this node has seen
};

struct ElasticRendezvousOptions {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds last_call_timeout{30'000};
  std::chrono::milliseconds read_timeout{60'000};
};

struct RoundResult {
  int round = 0;
  bool member = false;  // false: the round closed without this node (too late, or a spare)
  int slot = 0;
  int members = 0;      // how many nodes the round has
  int failures = 0;     // restart count the round starts with (max over its members)
  NodeRanks ranks;               // valid when member
  std::string master_host;       // group rank 0's address (MASTER_ADDR)
  std::string successor_host;    // the member this node watches (group rank + 1)
};

// The round a newcomer should join now.
int current_round(Store& store, Deadline deadline);

// Joins round `round` and returns once it closed. Throws TimeoutError naming the round and how
// many nodes joined when it does not close within the join timeout.
RoundResult join_round(Store& store, int round, const ElasticNode& self,
                       const ElasticRendezvousOptions& options);

// Moves the job on from round `round`; returns the round to join next (later than `round`).
int advance_round(Store& store, int round, Deadline deadline);

std::string round_key(int round, const std::string& name);

}  // namespace ddprun
