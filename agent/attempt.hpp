#pragma once
// One attempt of the job's workers on this node, within one round: agree on the workers'
// master port, start the workers, react to what happens (a worker exits, the round's outcome
// is decided elsewhere, a member is lost, the store is lost, a signal), wait at most the exit
// barrier once this node is done, stop the workers, and settle the root cause with the other
// nodes. Everything it starts (outcome watcher, keep-alive) stops when it returns.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "agent/event_queue.hpp"
#include "agent/outcome_watcher.hpp"
#include "agent/round_channel.hpp"
#include "agent/worker_env.hpp"
#include "agent/worker_progress.hpp"
#include "common/failure_record.hpp"
#include "common/launch_config.hpp"
#include "common/placement.hpp"
#include "common/progress.hpp"
#include "process/process_runner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

class EventLog;
class StatusBoard;
class FileTimerServer;

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

// What the agent runs on: the store, the rendezvous, the runner, and where things go.
struct AgentContext {
  std::string host;        // this node's name, for messages and the root cause
  store::Store* store = nullptr;  // the agent's own connection (rendezvous and coordination)
  store::StoreOpener open_store;  // more connections, for threads that block on their own
  RendezvousHandler* rendezvous = nullptr;
  ProcessRunner* runner = nullptr;
  // A port free on the given address now, for the workers' own store (group rank 0 only).
  std::function<int(const std::string& address)> reserve_master_port;
  std::string log_dir;         // this run's log directory (attempt_<round>/<local_rank>/...)
  EnvMap base_env;             // the environment workers inherit
  EventLog* events = nullptr;  // --events-file, optional
  StatusBoard* status = nullptr;  // what `ddprun status` and the metrics show, optional
  // The connection of the last round's outcome watcher, once it read the outcome: the next
  // watcher uses it instead of opening one (a recovery then costs the store's host no
  // connection per node).
  std::unique_ptr<store::Store> spare_watch_store;
  bool hosts_store = false;    // this agent's process serves the store: it leaves last
  // --numa-binding / --cpu-bind: each local rank's placement, planned at start; empty: none.
  std::vector<Placement> placements;
};

struct AttemptOutcome {
  bool success = false;
  Failure failure;          // when !success: the root cause, or why the round ended
  bool store_lost = false;  // the store is gone: nobody is left to say goodbye to
  // Every node stopped its workers and agreed on this root cause (RootCause::all_stopped), and
  // whether this node chose it.
  RoundEnd end;
  // The next round's master port, agreed with the root cause (Round::master_port).
  std::optional<int> next_master_port;

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
  using Emit = std::function<void(const std::string& name, nlohmann::json fields)>;

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
  std::optional<AttemptOutcome> on_worker_exited(const WorkerExit& exit);
  // The bookkeeping of every worker exit, and of every worker failure (the round's list, and
  // this attempt's record of how each local rank failed).
  void count_exit(const WorkerExit& exit);
  Failure record_worker_failure(const WorkerExit& exit);
  std::optional<AttemptOutcome> on_outcome(const std::string& value);
  std::optional<AttemptOutcome> on_signal(int signal);
  std::optional<AttemptOutcome> on_store_lost(const std::string& message);
  std::optional<AttemptOutcome> on_node_lost(int group_rank);
  std::optional<AttemptOutcome> on_barrier_expired();
  // --hang-timeout and FileTimer.
  std::optional<Deadline> hang_check_due() const;
  std::optional<AttemptOutcome> check_hang();
  std::optional<AttemptOutcome> vote_idle(Clock::time_point last_progress);
  std::optional<AttemptOutcome> on_progress();
  std::optional<AttemptOutcome> on_timer_expired(const AgentEvent& event);
  // Stacks of the live workers once the round has failed: at once for a hang; for a worker
  // failure (with --hang-timeout on), of the peers still alive a few seconds later.
  void take_stacks(const Failure& decided);
  void wait_for_peers(Deadline deadline);
  void explain(Failure& root_cause);
  void barrier_progress();
  std::optional<AttemptOutcome> handle(const AgentEvent& event);

  std::optional<int> agree_master_port(AttemptOutcome& failed);
  std::optional<int> offer_next_master_port();
  std::vector<WorkerLaunch> make_launches(int master_port);
  AttemptOutcome publish(const Failure& failure);
  AttemptOutcome decide(const std::string& value) const;
  Failure failure(Failure::Kind kind, int exit_code, const std::string& message) const;
  void stop_workers();
  void collect_late_failures(int stop_signal);
  std::string error_file(int local_rank) const;
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
  std::string dir_;  // attempt_<round>/ under the log dir

  std::unique_ptr<OutcomeWatcher> watcher_;
  std::unique_ptr<KeepAlive> keep_alive_;
  int running_ = 0;            // local workers not yet exited
  std::vector<int> pids_;      // by local rank
  std::vector<bool> exited_;   // by local rank
  std::vector<std::optional<Failure>> failed_;  // by local rank: how it failed on its own
  bool idle_voted_ = false;    // this node told the others its workers show no progress
  std::optional<Clock::time_point> vote_retry_;  // a vote the store refused, tried again then
  bool published_ = false;     // this node has said how its workers ended
  bool outcome_mine_ = false;  // this node's failure decided the round
  std::optional<Deadline> barrier_;  // once this node's workers all succeeded
  std::optional<ProgressClock> barrier_progress_;
};

// Tells the other nodes of `round`, quickly and on a connection of its own, that this agent
// stops on signal `sig`: a fixed membership stops everywhere, an elastic one re-forms without
// this node. Logged, not thrown, when the store cannot be reached.
void announce_stop(AgentContext& ctx, const Round& round, int sig);

// Renders a --log-line-prefix template for one worker ("{time}" is left for per-line use).
std::string render_prefix(const std::string& tmpl, int rank, int local_rank, int node,
                          const std::string& host, const std::string& role);

}  // namespace ddprun
