#pragma once
// The records an elastic round keeps in the store (rendezvous/elastic_rendezvous.hpp), as JSON:
// a joiner's descriptor ("node/<slot>"), a member's assignment ("assign/<slot>"), the closed
// round ("closed"), and a round closed ahead as a root cause carries it. Pure: each decoder
// throws RendezvousError naming the record it could not read, so a store holding something
// else fails the rendezvous with a message, not a crash.

#include <string>

#include "rendezvous/rank_assignment.hpp"

namespace ddprun {

struct ElasticNode {
  std::string id;    // unique per agent: "host:pid"
  std::string host;  // the address other nodes reach this node at
  int nproc = 1;
  int prev_rank = -1;  // group rank in the last round this node was a member of
  int failures = 0;    // worker-failure restarts this node has seen
  // That last round: its number, its member count, and the round whose keep-alive ring it kept
  // (itself when it formed its own); -1, 0, -1 for a node that was never a member.
  int prev_round = -1;
  int prev_members = 0;
  int prev_ring = -1;
};

// What the closer tells one member.
struct RoundAssignment {
  int group_rank = 0;
  int base_rank = 0;
  std::string successor_host;  // the member it watches: group rank + 1, wrapping around
};

// What the closer tells everyone: the round is closed, with these members.
struct ClosedRound {
  int members = 0;
  int world_size = 0;
  int failures = 0;         // restart count the round starts with (max over its members)
  std::string master_host;  // group rank 0's address; empty for a round without members
  int ring_round = -1;      // the earlier round whose keep-alive ring this one keeps; -1: none
  // The earlier round whose members these are, each with the ranks and successor it had there
  // (a round that keeps the ring: kept_ring): its members read no assignment. -1: none.
  int ranks_of = -1;
  // The claim of the node that closed it: members' assignments are under assign/<closer>/,
  // so that a closer whose claim was taken over (it looked dead) cannot mix its assignments
  // with the round's. Empty: directly under assign/ (a round closed ahead).
  std::string closer;
};

// A round closed ahead, by the node that chose the root cause of the round before it (every
// member back, nobody waiting to join): its number and its record, carried to every member in
// that root cause, so that no member asks the store for its place.
struct SettledRound {
  int round = 0;
  ClosedRound closed;
};

std::string encode_node(const ElasticNode& node);
ElasticNode decode_node(const std::string& text);
std::string encode_assignment(const RoundAssignment& assignment);
RoundAssignment decode_assignment(const std::string& text);
std::string encode_closed(const ClosedRound& closed);
ClosedRound decode_closed(const std::string& text);
std::string encode_settled(const SettledRound& settled);
SettledRound decode_settled(const std::string& text);

}  // namespace ddprun
