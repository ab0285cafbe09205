#pragma once
// The rendezvous as the agent sees it: a sequence of rounds. Each round fixes who takes part,
// every node's ranks and the workers' master address; the agent runs one attempt of the job's
// workers per round. Implementations: StaticRendezvous (fixed nodes and node ranks, a round per
// attempt) and ElasticRendezvous (the c10d backend: nodes join, leave and die between rounds).
// An etcd backend is a third implementation of the same interface.
//
// The agent never asks which implementation it has; where behaviour differs (a lost node ends
// the job, or the others re-form without it), it asks can_reform().
//
// A round ends with the first value written to "news/<prefix>/outcome" in the store (compare_set
// from ""): "success" (kRoundSucceeded), or a Failure record (common/failure_record.hpp). The
// rendezvous itself writes membership records there (a late joiner asking the members to
// re-form); the agent writes the rest.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.hpp"
#include "rendezvous/rank_assignment.hpp"

namespace ddprun::store {
class Store;
}  // namespace ddprun::store

namespace ddprun {

// The keys that every node of a round waits for (its close, its outcome, its root cause, its
// master port) live under "news/<round prefix>/", apart from the records each node writes, so
// that a store can serve all of them from one watch of "news/" (EtcdMirror) instead of a read
// and a watch per node and key.
inline constexpr const char* kNewsPrefix = "news/";

// How a round ended for this node, for the rendezvous of the next.
struct RoundEnd {
  // Every node of the round stopped its workers and agreed on its root cause (a settled
  // worker failure), so every node is back.
  bool all_stopped = false;
  // This node chose that root cause (its failure decided the round).
  bool chose_root_cause = false;
  // The next round, already closed by the chooser (RendezvousHandler::settle_next_round) and
  // carried to every node in the root cause; nullopt: the next round forms as usual.
  std::optional<std::string> next_round;
  // The next round's master port, agreed with the root cause: the workers' MASTER_PORT when
  // that round keeps every node's ranks (Round::master_port).
  std::optional<int> next_master_port;
};

struct Round {
  int id = 0;              // the attempt (static) or round (elastic): the log dir attempt_<id>
  std::string prefix;      // this round's keys in the store live under "<prefix>/"
  NodeRanks ranks;         // this node's place in the round
  int restart_count = 0;   // worker-failure restarts before this round (TORCHELASTIC_RESTART_COUNT)
  std::string master_addr; // group rank 0's address, the workers' MASTER_ADDR
  std::vector<std::string> hosts;  // by group rank; "" where this node does not know the host
  // Where the keep-alive ring's keys live ("<ring_prefix>/hb/<group rank>"), when not under
  // `prefix`: a ring kept from an earlier round with the same members, or the job's own.
  std::string ring_prefix;
  // Every member has the ranks it had in this node's last round: a static job's every attempt,
  // an elastic round of the last round's members.
  bool ranks_kept = false;
  // The workers' MASTER_PORT when agreed before the round began: group rank 0 of the last
  // round, the same node in this one, offered it in that round's news, and the root cause
  // carried it to every node.
  std::optional<int> master_port;

  // Where this round's news lives: "news/<prefix>" (see kNewsPrefix).
  std::string news_prefix() const { return kNewsPrefix + prefix; }
  const std::string& keep_alive_prefix() const {
    return ring_prefix.empty() ? prefix : ring_prefix;
  }

  // The host of a group rank, "?" when unknown.
  std::string host_of(int group_rank) const;
};

// What next_round() yields: a round this node is a member of, or, when the job ended without
// this node (it waited as a spare, or came after the end), the job's final outcome value.
struct NextRound {
  std::optional<Round> round;
  std::string job_outcome;  // without a round: "success" or a Failure record
};

// The job's first round, for a node that comes after it closed: where its keys are and how many
// members it had.
struct FirstRound {
  std::string prefix;
  int members = 0;
};

// Watches the round's members for as long as it lives; stopping it (destroying it) is
// immediate, interrupting any store call in progress.
class KeepAlive {
 public:
  virtual ~KeepAlive() = default;
};

class RendezvousHandler {
 public:
  using LostCallback = std::function<void(int group_rank)>;
  using ErrorCallback = std::function<void(std::string message)>;
  // Receives the rendezvous's steps for --events-file ("rendezvous_started", ...).
  using EventSink = std::function<void(const std::string& name, nlohmann::json fields)>;

  virtual ~RendezvousHandler() = default;

  void set_event_sink(EventSink sink) { sink_ = std::move(sink); }

  // Blocks until this node is a member of the next round, or until the job is over without it.
  // `restart_count` is the number of worker-failure restarts so far. Throws TimeoutError or
  // RendezvousError naming what is missing, ConnectionError, or InterruptedError when the
  // store was interrupted (a signal); an interrupted rendezvous gives back what it claimed.
  virtual NextRound next_round(int restart_count) = 0;

  // The job's first round once it has closed, for a node that was not one of its members (a
  // latecomer, a spare, an agent started again on a node the job went on without), so that the
  // node can look at itself: asked before its first next_round(), and by a node whose first
  // round was a later one. Nullopt while this node may still be one of its members, or when
  // members are fixed (static: no node comes later). Throws as next_round() does (a node
  // started with other settings is refused here).
  virtual std::optional<FirstRound> closed_first_round() { return std::nullopt; }

  // This node is done with `round` and will ask for the next one. When every node stopped its
  // workers (`end.all_stopped`), a static rendezvous starts the next attempt without a barrier.
  virtual void round_ended(const Round& round, const RoundEnd& end) = 0;

  // Called on the node that chose the root cause of `round` when every node has settled and
  // the job restarts, before the root cause is published: the rendezvous may close the next
  // round now, with the same members in the same places and `restart_count`, and return what
  // every node needs to take its place in it without a request of its own. The root cause
  // carries that to every node (RoundEnd::next_round). nullopt (the default): the next round
  // forms as usual. Throws Error when the store fails.
  virtual std::optional<std::string> settle_next_round(const Round& /*round*/,
                                                       int /*restart_count*/) {
    return std::nullopt;
  }

  // The prefix the round after `round` will have when the same nodes go on (a restart after a
  // worker failure), for the agent to send that round's outcome watch ahead; empty when it
  // cannot be told. A guess: the next round may still be another.
  virtual std::string next_prefix(const Round& /*round*/) const { return {}; }

  // Starts watching the round's members: `on_lost(group_rank)` at most once when a member
  // stops answering, `on_error` when the store cannot be reached. Both come from another thread.
  // Returns nullptr when there is nobody to watch.
  virtual std::unique_ptr<KeepAlive> keep_alive(const Round& round, LostCallback on_lost,
                                                ErrorCallback on_error) = 0;

  // This node's workers are done and it stops taking part in the keep-alive before the other
  // members: tells them it left on purpose, so that its silence is not taken for death.
  virtual void leave_early(const Round& round) = 0;

  // This node leaves a round that goes on without it (an elastic node stopped by a signal, one
  // the node check keeps out), once its outcome, a change of members, decided the round: its
  // keep-alive stops, and the mark it leaves through `store` by `deadline` keeps the member that
  // watches it from taking its silence for a death while they re-form. `store` is the caller's:
  // a signal interrupts the agent's own connection. Nothing to do where members are fixed: the
  // job stops.
  virtual void leave_round(const Round& /*round*/, store::Store& /*store*/,
                           Deadline /*deadline*/) {}

  // The job's outcome is known to this node and no round follows: whatever still watches the
  // members across rounds stops, so that nodes leaving now are not taken for dead.
  virtual void job_ended() {}

  // The job ended for every node (`how`: "succeeded", "failed: rank 1 on b exited with 3"):
  // recorded in the store by `deadline` (rendezvous/job_end.hpp), so that a node that comes
  // later with this run id is refused, saying so, instead of joining what is left of it.
  // Never throws.
  virtual void record_job_end(const std::string& how, Deadline deadline) = 0;

  // True when the job goes on without a node that leaves or dies (the others re-form); false
  // when the membership is fixed and losing a node ends the job.
  virtual bool can_reform() const = 0;

 protected:
  void emit(const std::string& name, nlohmann::json fields) const {
    if (sink_) sink_(name, std::move(fields));
  }

 private:
  EventSink sink_;
};

}  // namespace ddprun
