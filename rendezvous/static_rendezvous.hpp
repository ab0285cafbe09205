#pragma once
// Static rendezvous over the store: a fixed number of nodes, each with the node rank it was
// given. Every node claims its rank (a duplicate ends the rendezvous for every node, not a hang;
// the rank of an agent killed while it waited is taken over by the node started again), checks that all nodes
// agree on the node count, publishes its worker count, and waits for the others until the join
// timeout. Ranks are then assigned from what every node published.
//
// As a RendezvousHandler (StaticRendezvous): the membership is formed once; each attempt is a
// round ("attempt/<restart count>") that opens when every node has come back to it (a start
// barrier). Losing a node ends the job: the node count is fixed, and so is the keep-alive's
// ring, formed once and kept across attempts (RingKeeper).

#include <string>
#include <vector>

#include "rendezvous/heartbeat.hpp"
#include "rendezvous/job_settings.hpp"
#include "rendezvous/rank_assignment.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/store.hpp"

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
  std::chrono::milliseconds progress_interval{10'000};  // see common/progress.hpp
  std::string token;  // claims the node rank; unique per agent (see make_claim_token)
  // How often a node shows a sign of life while it waits for the others; a rank whose holder
  // misses three is taken over by the next node started with it.
  std::chrono::milliseconds claim_beat{1'000};
  // What every node of the job must have been started with (see agreed_settings): the first
  // node's stand, and a node that differs ends the rendezvous for all.
  JobSettings settings;
  // This node's agent serves the store: when the rendezvous ends for all, it waits (briefly)
  // for the others to learn why before it goes.
  bool serves_store = false;
};

// A token unique to this agent, for claiming its node rank.
std::string make_claim_token(const NodeInfo& self);
// The key holding the claim on a node rank.
std::string owner_key(int node_rank);

// Throws RendezvousError (duplicate rank, mismatched node counts or settings: every node then
// fails at once with the same line), TimeoutError naming the missing node ranks, or the store's
// ConnectionError / InterruptedError.
RendezvousResult static_rendezvous(store::Store& store, const StaticRendezvousOptions& options);

class StaticRendezvous final : public RendezvousHandler {
 public:
  // `store` is the agent's own connection (used from its thread only); `master_addr` is node 0's
  // address, the workers' MASTER_ADDR.
  StaticRendezvous(store::Store& store, store::StoreOpener open_store, StaticRendezvousOptions options,
                   std::string master_addr, KeepAliveTiming keep_alive);

  NextRound next_round(int restart_count) override;
  void round_ended(const Round& round, const RoundEnd& end) override;
  std::string next_prefix(const Round& round) const override;
  std::unique_ptr<KeepAlive> keep_alive(const Round& round, LostCallback on_lost,
                                        ErrorCallback on_error) override;
  void leave_early(const Round& round) override;
  void job_ended() override;
  void record_job_end(const std::string& how, Deadline deadline) override;
  bool can_reform() const override { return false; }

 private:
  void join();
  void wait_for_abort_seen();
  void start_barrier(const std::string& prefix, int attempt);

  store::Store& store_;
  store::StoreOpener open_store_;
  StaticRendezvousOptions options_;
  std::string master_addr_;
  KeepAliveTiming keep_alive_;
  std::optional<RendezvousResult> joined_;
  // The attempt every node is known to be back for (the last one ended with all stopped).
  std::optional<int> all_back_for_;
  RingKeeper ring_;
};

}  // namespace ddprun
