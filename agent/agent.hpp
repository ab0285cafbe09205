#pragma once
// The agent's life (see docs/architecture.md): rounds from the rendezvous, and in each an
// attempt of the job's workers (agent/attempt.hpp). A worker failure restarts every node's
// workers together while restarts remain; a membership change re-forms the round without
// spending one. The agent does not know which rendezvous it has, and does not turn its result
// into an exit code: the launcher does (launcher/job_report.hpp).
//
// The agent sees the store only through Store, the rendezvous through RendezvousHandler and its
// workers through ProcessRunner, so it runs the same on MemoryStore with a fake runner as on
// the real ones.

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/attempt.hpp"
#include "agent/event_log.hpp"
#include "agent/event_queue.hpp"
#include "agent/file_timer.hpp"
#include "agent/worker_progress.hpp"
#include "common/failure_record.hpp"
#include "common/launch_config.hpp"

namespace ddprun {

struct Finding;
struct NodeProbe;
struct ProbeInputs;

// One attempt of this node's workers, for the summary at the end.
struct AttemptRecord {
  int round = 0;          // the round (static: the attempt) it ran in
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT of its workers
  NodeRanks ranks;
  std::string ended;      // "succeeded", or how it ended: "failed: ...", "re-formed: ...", ...
  double seconds = 0;     // from its start to its end
};

struct RunResult {
  enum class End {
    kSucceeded,         // every worker of the job exited 0
    kFailed,            // a failure ended the job: root_cause says which
    kStopped,           // this agent received `signal`
    kRendezvousFailed,  // the rendezvous or the store failed: reason says how
    kInternalError,     // a bug or an unexpected system error
    kNodeCheckRefused,  // --node-check=refuse found something: reason says what
    kNodeCheckExcluded,  // --node-check=exclude left this node out; the others go on
  };
  End end = End::kSucceeded;
  int signal = 0;
  int restarts = 0;    // worker-failure restarts spent
  int world_size = 0;  // of the last round this node was a member of (0: none)
  int group_rank = -1;
  std::optional<Failure> root_cause;
  std::string reason;  // a one-line summary of how the run ended
  // For the summary: who this node is, what it ran, and for how long.
  std::string host;
  int max_restarts = 0;
  int membership_changes = 0;  // rounds that ended because a node joined, left or died
  std::vector<AttemptRecord> attempts;
  double seconds = 0;  // the whole run, rendezvous included
};

class Agent {
 public:
  Agent(const LaunchConfig& config, AgentContext context);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  RunResult run();

  // Thread-safe (called from the signal thread): stop the workers with this signal and end the
  // run as stopped by it.
  void on_signal(int signal);

 private:
  RunResult run_rounds();
  // What --node-check decided for this node: start the round's workers (neither set), form the
  // next round without the nodes it left out (`reform`), or end the run (`end`).
  struct NodeCheckOutcome {
    bool reform = false;
    std::optional<RunResult> end;
  };
  // --node-check at the job's first round.
  NodeCheckOutcome check_nodes();
  // --node-check on a node that comes after it, judged against the first round's reports there
  // by `reports_by`; a result when the node is to stay out.
  std::optional<RunResult> check_late_node(const FirstRound& first, Deadline reports_by);
  // --node-check on a node that found the first round open, became a member of a later one and
  // has not looked yet; a result when the node is to stay out.
  std::optional<RunResult> check_joined_late();
  // What this node looks at, as node `node` with `workers` workers.
  ProbeInputs probe_inputs(int node, int workers) const;
  RunResult refuse(std::string reason);
  void publish_check_outcome(Failure::Kind kind, int exit_code, const std::string& message,
                             const char* what);
  NodeCheckOutcome exclude(const std::vector<int>& excluded, const std::vector<Finding>& findings,
                           const std::vector<NodeProbe>& nodes);
  void start_file_timer();
  RunResult finished_without_this_node(const std::string& outcome) const;
  static std::string how_it_ended(const AttemptOutcome& outcome);
  RunResult finish_success(bool left_early);
  Deadline end_record_deadline() const;
  RunResult finish_failure(const Failure& failure, bool store_lost);
  RunResult result(RunResult::End end, std::string reason) const;
  void log_restart(const Failure& failure) const;
  void say_goodbye(int lost_node);
  // The runner's stop, whose failure is logged: the agent's own end follows either way.
  void stop_workers(int signal, Clock::duration grace);
  void emit(const std::string& name, nlohmann::json fields = nlohmann::json::object());

  const LaunchConfig& config_;
  AgentContext ctx_;
  EventQueue events_;
  WorkerProgress progress_{events_};
  std::unique_ptr<FileTimerServer> timers_;  // TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::optional<Round> round_;  // the round this node is (or last was) a member of
  std::vector<AttemptRecord> attempts_;
  int membership_changes_ = 0;
  bool node_checked_ = false;  // --node-check ran, or was passed over, in this node's first round
  Clock::time_point start_ = Clock::now();
  int restarts_ = 0;            // worker-failure restarts so far (TORCHELASTIC_RESTART_COUNT)
  std::optional<int> next_master_port_;  // agreed with the last attempt's root cause
  std::atomic<int> signal_{0};
  SideConnection side_;  // interrupted with ctx_.store by a signal
};

}  // namespace ddprun
