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
  // Off when nobody else can read the store (one node keeps it in its own memory).
  bool publish = true;
};

// `j` as one line of JSON; bytes that are not UTF-8 (a worker's output) replaced.
std::string dump_json(const nlohmann::json& j);

class JobMonitor {
 public:
  // An agent's (`board` is its status) or, with none, a --hosts command's, which shows every
  // node's record from the store. Serves at once (a metrics port that cannot be bound throws
  // ConnectionError before anything else starts); the store comes with attach_store().
  JobMonitor(StatusBoard* board, JobMonitorOptions options);
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  // The job's store, once there is one: the agent's record is published to it (options.publish)
  // and the other nodes' are read from it. `store_requests` counts the requests of the store
  // this process serves (null: it serves none).
  void attach_store(store::StoreOpener open_store,
                    std::function<std::optional<std::uint64_t>()> store_requests = nullptr);

  // The run has ended and the board says how: the last record goes to the store (when one was
  // written there and the store is still reachable; at most a second).
  void finish();
  // Stops serving and publishing, waiting for any request in progress: after it, nothing of
  // this monitor touches the store again. For before the store itself goes.
  void stop();

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
  std::mutex store_mutex_;  // guards the two below, set once by attach_store()
  store::StoreOpener open_store_;
  std::function<std::optional<std::uint64_t>()> store_requests_;
  JobMonitorOptions options_;
  CpuSampler sampler_;

  // The other nodes' records, read at most once a second however many ask; one request reads,
  // the others meanwhile answer with the last read.
  std::mutex cache_mutex_;
  bool refreshing_ = false;
  Clock::time_point cache_time_{};
  std::vector<NodeStatus> cache_;
  std::unique_ptr<store::Store> reader_;  // used by the refresher only
  std::atomic<bool> capturing_{false};

  std::unique_ptr<StatusPublisher> publisher_;
  std::unique_ptr<StatusServer> server_;
};

}  // namespace ddprun
