#pragma once
// What the agents of one round tell each other through the store, under the round's prefix:
// the workers' master port, the round's outcome (the first writer wins), every worker failure
// and the root cause chosen among them, and the goodbyes at the end of the job. The port, the
// outcome and the root cause, which every node waits for, are under the round's news prefix.

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/stack_report.hpp"
#include "common/failure_record.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/prefix_store.hpp"

namespace ddprun {

// A round's agreed root cause, and whether every node had stopped its workers and settled
// before it was chosen: then every node is back from the round, and a static job's next attempt
// needs no start barrier of its own.
struct RootCause {
  Failure failure;
  bool all_stopped = false;
  // The next round's master port, when group rank 0 offered one before it settled: used when
  // that round keeps every node's ranks (Round::ranks_kept).
  std::optional<int> next_master_port;
  // The next round, when the chooser closed it ahead (RendezvousHandler::settle_next_round).
  std::optional<std::string> next_round;
};

class RoundChannel {
 public:
  // Does not own `store`; every call gets a fresh deadline of `read_timeout`.
  RoundChannel(store::Store& store, const Round& round, std::chrono::milliseconds read_timeout);

  // The key that holds the round's outcome, in the unprefixed store (for a watcher that has a
  // connection of its own).
  std::string outcome_key() const;
  // The same for the round with `prefix`.
  static std::string outcome_key(const std::string& prefix);

  // This node's arrival in resolve_root_cause goes over `connection` instead of the agent's
  // own: the outcome watcher's, idle once it read this round's outcome, with the next round's
  // outcome watch queued on it (Store::pipeline_get) to go in the same write.
  void arrive_on(store::Store& connection) { arrival_ = &connection; }

  // Group rank 0 publishes the port of the workers' store; the others wait for it. nullopt:
  // the round was decided before group rank 0 published one (withdraw_master_port), and its
  // outcome says why.
  void publish_master_port(int port);
  std::optional<int> master_port(Deadline deadline);
  // After publishing an outcome: ends the others' wait for a port that may never come, where
  // none was published (a group rank 0 that leaves before it publishes one).
  void withdraw_master_port();
  // Group rank 0 offers the next round's port before it settles; the chooser puts it into
  // the root cause.
  void offer_next_master_port(int port);

  // Writes `value` as the round's outcome unless one was written already; returns the outcome.
  std::string publish_outcome(const std::string& value);
  // The round's outcome, waiting for it until `deadline`.
  std::string outcome(Deadline deadline);
  // This node's workers all exited 0. When it was the last node to say so, it publishes
  // success and returns the round's outcome (success, unless a failure was published first);
  // otherwise nullopt: the outcome comes from the others.
  std::optional<std::string> report_success();
  // The group ranks whose workers have not all succeeded yet (one check per node).
  std::vector<int> nodes_still_running();

  // --hang-timeout: this node's workers have shown no progress for the timeout (or are all
  // done). Returns the number of nodes that say so now; the node that makes it every node of
  // the round declares the hang.
  std::int64_t vote_idle();
  // This node's workers moved again.
  void withdraw_idle();

  // Where this node's ranks were when the round ended (stacks taken), for the root cause.
  void record_where(const std::vector<RankWhere>& ranks);
  // Every node's records (a node that recorded none is left out).
  std::vector<RankWhere> all_where();

  // Adds a worker failure to the round's list (logged, not thrown, when the store fails).
  void record_failure(const Failure& failure);
  // The root cause: the earliest recorded failure, once every node has stopped and recorded
  // its own (or `settle_time` passed). The chooser (whose failure ended the round) picks it
  // and publishes it; the others read it. Falls back to `first` when the store fails.
  // `refine`, when given, runs on the chooser's pick before it is published (the stacks'
  // grouping is added there). The chooser also carries the port group rank 0 offered
  // (offer_next_master_port) into the root cause, and, when every node settled, the next round
  // `settle` closed ahead for its pick (nullopt from it, or no `settle`: none).
  using Settle = std::function<std::optional<std::string>(const Failure& root)>;
  RootCause resolve_root_cause(const Failure& first, bool chooser,
                               std::chrono::milliseconds settle_time,
                               const std::function<void(Failure&)>& refine = {},
                               const Settle& settle = {});

  // The end of the job for this node: its goodbye, one key of its own, so that saying it twice
  // (again on a fresh connection, after a signal cut the first one short) counts once. Throws.
  void leave(Deadline deadline);
  // The node serving the store waits, until `deadline`, for the goodbye of every node but
  // `lost_node` (declared dead: it will not come; -1 for none), so that the store does not
  // vanish under nodes that still read the outcome. Throws TimeoutError naming the missing nodes.
  void wait_for_goodbyes(int lost_node, Deadline deadline);

 private:
  Deadline op() const { return Deadline::after(read_timeout_); }

  store::Store& base_;  // the store under both prefixes, for a call that spans them
  store::Store* arrival_;  // where this node arrives: base_, or arrive_on's connection
  store::PrefixStore store_;
  store::PrefixStore news_;  // what every node of the round waits for (kNewsPrefix)
  Round round_;
  std::chrono::milliseconds read_timeout_;
};

}  // namespace ddprun
