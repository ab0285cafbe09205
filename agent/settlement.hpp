#pragma once
// The restart's path, in one place: how the nodes of a round that failed (a worker's failure or
// a hang) agree on its root cause, and what that hands the next round so that a restart costs
// each node as few store requests as the protocol allows. In order:
//
//  1. Group rank 0 reserves the next round's master port before it settles, and offers it
//     through the round's news (offer_next_master_port): the root cause carries it, so no node
//     reads the port on the restart.
//  2. Each node arrives (RoundChannel::resolve_root_cause): one Store::arrive request counts
//     it, releases the settle barrier when it is the last, and waits for the root cause. The
//     arrival goes over the outcome watcher's connection, idle since it read this round's
//     outcome, with the next round's outcome watch queued behind it in the same write
//     (store::Pipelining, on the prefix RendezvousHandler::next_prefix guesses), so that the
//     next watcher needs neither a connection nor a request of its own
//     (AgentContext::spare_watch_store). A signal interrupts that connection as it does the
//     agent's own (SideConnection).
//  3. The chooser (whose failure decided the round) picks the earliest failure, explains it by
//     the ranks' stacks when they were taken, and, when the job restarts, lets the rendezvous
//     close the next round ahead (RendezvousHandler::settle_next_round): the same members in
//     the same places, carried in the root cause, so nobody joins again.
//  4. What every node takes to the next round is one value, RoundEnd: whether every node
//     stopped, whether this node chose, the next round closed ahead and the next master port
//     (RendezvousHandler::round_ended; Round::ranks_kept and Round::master_port come of it).

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>

#include "agent/agent_context.hpp"
#include "agent/round_channel.hpp"
#include "common/failure_record.hpp"
#include "common/launch_config.hpp"
#include "rendezvous/rendezvous_handler.hpp"
#include "store/store.hpp"

namespace ddprun {

// A store connection besides the agent's own that the agent's thread may block on (the
// outcome watcher's, idle, carrying this node's arrival): a signal ends that wait too.
// Thread-safe.
class SideConnection {
 public:
  // From the signal thread: interrupts the connection in use, and any put in use later.
  void interrupt();

  // While it lives, `store` is the connection in use.
  class Use {
   public:
    Use(SideConnection& side, store::Store& store);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    SideConnection& side_;
  };

 private:
  std::mutex mutex_;
  store::Store* in_use_ = nullptr;  // under mutex_
  bool interrupted_ = false;        // under mutex_
};

// The root cause every node agreed on, and what the next round starts from.
struct Settlement {
  Failure root_cause;
  RoundEnd end;
};

class Settler {
 public:
  // All references must outlive the settler; `signal` is the agent's (a signal received ends
  // the job, so no next round is closed ahead).
  Settler(const LaunchConfig& config, AgentContext& ctx, const Round& round,
          RoundChannel& channel, SideConnection& side, const std::atomic<int>& signal);

  // Once this node's workers are stopped and the outcome watcher is torn down (its idle
  // connection is ctx.spare_watch_store). `decided` is this node's view of the round's
  // outcome, `chose` whether its failure decided it; the chooser waits at most `settle_time`
  // for the others, and `refine` runs on its pick before it is published.
  Settlement settle(const Failure& decided, bool chose, std::chrono::milliseconds settle_time,
                    const std::function<void(Failure&)>& refine);

 private:
  std::optional<int> offer_next_master_port();
  // Step 2's pipelining: true when the next round's outcome watch is queued on the spare
  // connection, which then carries this node's arrival.
  bool send_next_watch_ahead();

  const LaunchConfig& config_;
  AgentContext& ctx_;
  const Round& round_;
  RoundChannel& channel_;
  SideConnection& side_;
  const std::atomic<int>& signal_;
};

}  // namespace ddprun
