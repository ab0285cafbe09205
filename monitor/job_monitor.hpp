#pragma once
// Everything that lets a running job be watched, for one agent or one --hosts command: the
// control socket and the metrics endpoint (status_server.hpp), and, for an agent, its record
// in the store (status_publisher.hpp). An agent answers with its own record, fresh, and the
// other nodes' records as the store holds them; a --hosts command with every node's.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "agent/status_board.hpp"
#include "monitor/proc_stats.hpp"
#include "monitor/status_publisher.hpp"
#include "monitor/status_server.hpp"
#include "process/stack_capture.hpp"
#include "store/store.hpp"

namespace ddprun {

struct JobMonitorOptions {
  std::string metrics_addr = "127.0.0.1";
  int metrics_port = -1;       // -1: no metrics endpoint
  bool control_socket = true;  // off when the control directory is unusable (said once)
  std::string stacks_dir;      // where --stacks writes (an agent's log dir); empty: not offered
  std::chrono::milliseconds publish_period = StatusPublisher::kDefaultPeriod;
};

// `j` as one line of JSON; bytes that are not UTF-8 (a worker's output) replaced.
std::string dump_json(const nlohmann::json& j);

class JobMonitor {
 public:
  // An agent's: `board` is its status; `store_requests` counts its store's requests (null
  // when it serves none).
  JobMonitor(StatusBoard& board, store::StoreOpener open_store,
             std::function<std::optional<std::uint64_t>()> store_requests,
             JobMonitorOptions options);
  // A --hosts command's: no node of its own, every node's record from the store.
  JobMonitor(store::StoreOpener open_store, JobMonitorOptions options);
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  // The run has ended and the board says how: the last record goes to the store.
  void finish();

  int metrics_port() const;
  std::string control_path() const;

 private:
  std::string status_json();
  std::string metrics();
  std::string stacks();
  std::vector<NodeStatus> job_records();
  std::vector<NodeStatus> merged_records();
  void start_server();

  StatusBoard* board_ = nullptr;
  store::StoreOpener open_store_;
  std::function<std::optional<std::uint64_t>()> store_requests_;
  JobMonitorOptions options_;
  CpuSampler sampler_;

  // The other nodes' records, read at most once a second however many ask.
  std::mutex cache_mutex_;
  std::condition_variable cache_cv_;
  bool refreshing_ = false;
  Clock::time_point cache_time_{};
  std::vector<NodeStatus> cache_;
  std::unique_ptr<store::Store> reader_;  // used by the refresher only
  std::atomic<bool> capturing_{false};

  std::unique_ptr<StatusPublisher> publisher_;
  std::unique_ptr<StatusServer> server_;
};

}  // namespace ddprun
