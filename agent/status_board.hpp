#pragma once
// What this agent knows of its job right now, for `ddprun status` and the metrics
// (monitor/): the round, the restarts, the failures by kind, and a row per local rank with its
// pid, state and last output line. The agent's events feed it (Agent::emit); the runner's thread
// feeds each rank's last line through a hook that may outlive the board. Readers take a copy
// (snapshot) under one short lock: no reader can hold up the agent or its workers' output.

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <condition_variable>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/deadline.hpp"

namespace ddprun {

struct Round;

// One rank as a status reader sees it. cpu_seconds, rss_bytes and cpu_percent are filled by
// the reader's side (monitor/proc_stats.hpp), from /proc, when the rank runs on its machine.
struct RankStatus {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  std::string state;              // running, stopped by SIGSTOP (alive), succeeded, exited N, killed by SIGX, stopped
  double last_output_age = -1;    // seconds since its last output line, as of `updated`; -1: none
  std::string last_line;          // cut to kMaxLineBytes
  double cpu_seconds = -1;        // -1: unknown
  double cpu_percent = -1;
  std::int64_t rss_bytes = -1;
};

// The end state of a node --node-check=exclude left out: the job went on without it, so its
// exit code is not the job's.
inline constexpr char kLeftOut[] = "left out";

// One agent's record: the same JSON in the store (monitor/status_publisher.hpp), on its
// control socket and in `ddprun status --json`.
struct NodeStatus {
  std::string run_id;
  std::string backend;   // static, c10d, etcd
  std::string host;
  std::string version;
  int agent_pid = 0;
  int node = -1;         // group rank in the current round; -1 before the first
  int nodes = 0;         // members of the current round
  int world_size = 0;
  int round = -1;
  std::string state = "starting";  // starting, rendezvous, running, stopping, restarting, or ended: succeeded, failed, stopped
  int restarts = 0;
  int max_restarts = 0;
  int membership_changes = 0;
  int rounds = 0;                 // rendezvous rounds completed
  double rendezvous_seconds = 0;  // their total duration
  std::map<std::string, int> failures;  // by kind: exit_code, signal, hang, node_lost, stopped, agent
  double started = 0;    // unix seconds: the agent's start
  double updated = 0;    // unix seconds: when this record was taken
  std::string ended;     // how the run ended, once it has
  int exit_code = -1;    // the agent's exit code, once it has ended
  std::vector<RankStatus> ranks;
  // The --node-check event's fields (figures, links, findings, seconds); null: not run here.
  nlohmann::json node_check;

  nlohmann::json to_json() const;
  // Throws Error naming the field when `j` is not a node record.
  static NodeStatus from_json(const nlohmann::json& j);
  bool has_ended() const { return exit_code >= 0; }
};

class StatusBoard {
 public:
  static constexpr std::size_t kMaxLineBytes = 512;

  StatusBoard(std::string run_id, std::string backend, std::string host, int max_restarts);

  // An agent event (agent/event_log.hpp names them) and its fields.
  void on_event(const std::string& name, const nlohmann::json& fields);
  void on_round(const Round& round);
  // The run is over: its state (succeeded, failed, stopped), how it ended, the exit code.
  void finish(const std::string& state, const std::string& how, int exit_code);

  // Called with each line (or progress-bar state) local rank `local_rank` writes, from the
  // runner's thread: cheap, and safe to call after the board is gone.
  std::function<void(std::string_view)> line_hook(int local_rank);

  NodeStatus snapshot() const;
  // Counts changes of state (not output lines): a publisher waits on it.
  std::uint64_t version() const;
  // Blocks until version() differs from `seen`, close() is called, or `until`.
  void wait_for_change(std::uint64_t seen, Clock::time_point until) const;
  // Blocks while the node is between two attempts (stopping its workers, restarting, in a
  // rendezvous), until close() is called or `until`.
  void wait_between_attempts(Clock::time_point until) const;
  void close();

 private:
  struct LastLine;
  void changed();  // with mutex_ held

  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  NodeStatus status_;
  std::vector<std::shared_ptr<LastLine>> lines_;  // by local rank, this attempt's
  Clock::time_point rendezvous_started_{};
  int base_rank_ = 0;
  std::uint64_t version_ = 0;
  bool closed_ = false;
};

}  // namespace ddprun
