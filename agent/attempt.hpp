#pragma once
// One attempt of the job's workers on this node, within one round: agree on the workers'
// master port, start the workers, react to what happens (a worker exits, the round's outcome
// is decided elsewhere, a member is lost, the store is lost, a signal, a hang), wait at most the
// exit barrier once this node is done, stop the workers, and settle the root cause with the
// other nodes. Everything it starts (outcome watcher, keep-alive) stops when it returns.
//
// Its helpers, each in a file of its own: the workers' launches (worker_launch.hpp), hang
// detection (hang_watch.hpp), the ranks' stacks (rank_stacks.hpp) and the settlement that hands
// the next round what it needs (settlement.hpp).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "agent/agent_context.hpp"
#include "agent/event_queue.hpp"
#include "agent/hang_watch.hpp"
#include "agent/local_workers.hpp"
#include "agent/outcome_watcher.hpp"
#include "agent/round_channel.hpp"
#include "agent/settlement.hpp"
#include "agent/worker_launch.hpp"
#include "agent/worker_progress.hpp"
#include "common/failure_record.hpp"
#include "common/launch_config.hpp"
#include "common/progress.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

class FileTimerServer;

struct AttemptOutcome {
  bool success = false;
  Failure failure;          // when !success: the root cause, or why the round ended
  bool store_lost = false;  // the store is gone: nobody is left to say goodbye to
  // A success of this node's own: its exit barrier expired while other nodes still ran, so the
  // job may still go on (and fail) without it.
  bool left_early = false;
  // What the settlement hands the next round (settlement.hpp); empty when the round was not
  // settled.
  RoundEnd end;

  static AttemptOutcome succeeded() {
    AttemptOutcome o;
    o.success = true;
    return o;
  }
  static AttemptOutcome failed(Failure f, bool store_lost = false) {
    AttemptOutcome o;
    o.failure = std::move(f);
    o.store_lost = store_lost;
    return o;
  }
};

class Attempt {
 public:
  using Emit = RendezvousHandler::EventSink;

  // `events` is the agent's queue: it must outlive the attempt (the runner and the keep-alive
  // report into it). `progress` and `timers` (null: no FileTimer server) are the agent's too.
  // `side` is the agent's, interrupted by a signal with its own connection.
  Attempt(const LaunchConfig& config, AgentContext& ctx, const Round& round, EventQueue& events,
          const std::atomic<int>& signal, SideConnection& side, Emit emit,
          WorkerProgress& progress, FileTimerServer* timers);
  ~Attempt();

  AttemptOutcome run();

 private:
  void start_watching();
  AttemptOutcome wait_for_outcome(std::optional<AttemptOutcome> outcome);
  // Each returns the round's outcome once it is decided, nullopt while it is not.
  std::optional<AttemptOutcome> start_workers();
  std::optional<AttemptOutcome> handle(const AgentEvent& event);
  std::optional<AttemptOutcome> on_worker_exited(const WorkerExit& exit);
  std::optional<AttemptOutcome> on_outcome(const std::string& value);
  std::optional<AttemptOutcome> on_signal(int signal);
  std::optional<AttemptOutcome> on_store_lost(const std::string& message);
  std::optional<AttemptOutcome> on_node_lost(int group_rank);
  std::optional<AttemptOutcome> on_barrier_expired();
  std::optional<AttemptOutcome> on_timer_expired(const AgentEvent& event);
  void barrier_progress();
  // The round's list of failures, and this attempt's record of how each local rank failed.
  Failure record_worker_failure(const WorkerExit& exit);

  std::optional<int> agree_master_port(AttemptOutcome& failed);
  AttemptOutcome publish(const Failure& failure);
  AttemptOutcome decide(const std::string& value) const;
  Failure failure(Failure::Kind kind, int exit_code, const std::string& message) const;
  void stop_workers();
  void collect_late_failures(int stop_signal);
  // Whether every node takes its ranks' stacks for the decided failure: a hang; a worker's
  // collective timeout; any worker failure with --hang-timeout.
  bool takes_stacks(const Failure& decided) const;
  // Stacks of the live workers once the round has failed: at once for a hang; for a worker
  // failure, of the peers still alive a few seconds later.
  void take_stacks(const Failure& decided);
  void wait_for_peers(Deadline deadline);
  // Stops the keep-alive and the watcher, keeping the watcher's connection for the next
  // round once it has read the outcome; waits up to `watcher_grace` for that.
  void teardown(Clock::duration watcher_grace = Clock::duration::zero());

  const LaunchConfig& config_;
  AgentContext& ctx_;
  const Round& round_;
  EventQueue& events_;
  const std::atomic<int>& signal_;
  SideConnection& side_;
  Emit emit_;
  WorkerProgress& progress_;
  FileTimerServer* timers_;
  RoundChannel channel_;
  AttemptDir dir_;
  HangWatch hang_;

  std::unique_ptr<OutcomeWatcher> watcher_;
  std::unique_ptr<KeepAlive> keep_alive_;
  LocalWorkers workers_;
  bool published_ = false;     // this node has said how its workers ended
  bool outcome_mine_ = false;  // this node's failure decided the round
  std::optional<Deadline> barrier_;  // once this node's workers all succeeded
  std::optional<ProgressClock> barrier_progress_;
};

// Tells the other nodes of `round`, quickly and on a connection of its own, that this agent
// stops on signal `sig`: a fixed membership stops everywhere, an elastic one re-forms without
// this node. Logged, not thrown, when the store cannot be reached.
void announce_stop(AgentContext& ctx, const Round& round, int sig);

// Publishes `f` as `round`'s outcome in the same way; when it decided the round and is a change
// of members, this node also leaves the round's keep-alive (RendezvousHandler::leave_round).
// `what` names the news in the warning when the store cannot be reached.
void announce_leaving(AgentContext& ctx, const Round& round, const Failure& f,
                      const std::string& what);

}  // namespace ddprun
