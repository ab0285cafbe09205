#pragma once
// The agent's life (see docs/design.md): rendezvous, then attempts. Each attempt starts the
// node's workers together with every other node, watches them, and ends when the job's outcome
// for that attempt is decided in the store: "success" once every node's workers exited 0, or the
// first failure anywhere (the root cause). A failure restarts every node's workers together
// while restarts remain.
//
// The agent sees the store only through Store and its workers only through ProcessRunner, so
// this state machine runs the same on MemoryStore with a fake runner as on the real ones.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/elastic_rendezvous.hpp"
#include "agent/event_log.hpp"
#include "agent/event_queue.hpp"
#include "agent/heartbeat.hpp"
#include "agent/failure.hpp"
#include "agent/process_runner.hpp"
#include "agent/static_rendezvous.hpp"
#include "agent/worker_env.hpp"
#include "common/exit_codes.hpp"
#include "common/launch_config.hpp"
#include "rendezvous/store.hpp"

namespace ddprun {


struct AgentContext {
  std::string host;  // this node's name, for messages and the root cause
  Store* store = nullptr;  // the agent's connection (rendezvous and coordination)
  // Opens another connection, connecting until the deadline (the outcome watcher and the
  // heartbeat block on their own).
  std::function<std::unique_ptr<Store>(Deadline)> open_store;
  ProcessRunner* runner = nullptr;
  // Node 0 only: a port free on the master address, for the workers' own store.
  std::function<int()> reserve_master_port;
  std::string log_dir;  // this run's log directory (attempt_N/<local_rank>/...)
  EnvMap base_env;      // the environment workers inherit
  EventLog* events = nullptr;  // --events-file, optional
  bool hosts_store = false;    // this agent's process serves the store: it leaves last
};

struct RunResult {
  int exit_code = 0;
  int restarts = 0;  // attempts after the first
  std::optional<Failure> root_cause;
  std::string reason;  // a one-line summary of how the run ended
};

class ElasticAgent {
 public:
  ElasticAgent(const LaunchConfig& config, AgentContext context);
  ~ElasticAgent();

  RunResult run();

  // Thread-safe (called from the signal thread): stop the workers with this signal and end the
  // run with 128+signal.
  void on_signal(int signal);

 private:
  static constexpr const char* kSuccess = "success";
  // A failure for any reason but a worker's exit ends the job: it is not retried.
  static bool retryable(const Failure& f) { return f.kind == Failure::Kind::kWorker; }

  struct Outcome {
    bool success = false;
    Failure failure;
  };

  RunResult run_job();
  RunResult run_static();
  RunResult run_elastic();
  RunResult finish_success();
  RunResult finish_failure(const Failure& failure);
  void log_restart(const Failure& failure) const;
  void announce_signal(int signal);
  void record_failure(const Failure& failure);
  Failure resolve_root_cause(const Failure& first);
  std::optional<RunResult> outsider(const RoundResult& round);
  void rendezvous();
  Outcome run_attempt();
  void start_barrier();
  std::vector<WorkerLaunch> make_launches(int master_port);
  Outcome decide(const std::string& value);
  std::string publish_failure(const Failure& failure);
  void start_watcher();
  void start_heartbeat();
  void stop_watcher();
  void leave();
  Failure agent_failure(const std::string& message) const;
  std::string key(const std::string& name) const;
  void emit(const std::string& name, nlohmann::json fields = nlohmann::json::object());
  std::string attempt_dir() const;

  const LaunchConfig& config_;
  AgentContext ctx_;
  EventQueue events_;
  RendezvousResult rdzv_;
  int attempt_ = 0;  // restarts after worker failures so far (TORCHELASTIC_RESTART_COUNT)
  int round_ = 0;    // elastic: the round this node is a member of
  std::string prefix_ = "attempt/0";  // store keys of the current attempt or round
  std::string master_addr_;
  std::unique_ptr<Heartbeat> heartbeat_;
  bool store_lost_ = false;
  bool rendezvous_done_ = false;  // ranks are known: leaving must be announced
  int lost_nodes_ = 0;  // nodes of the final attempt known dead
  bool outcome_mine_ = false;  // this agent's failure ended the current attempt
  std::atomic<int> signal_{0};

  std::mutex watcher_mutex_;
  std::unique_ptr<Store> watcher_store_;
  std::thread watcher_;
};

// Renders a --log-line-prefix template for one worker ("{time}" is left for per-line use).
std::string render_prefix(const std::string& tmpl, int rank, int local_rank, int node,
                          const std::string& host, const std::string& role);

}  // namespace ddprun
