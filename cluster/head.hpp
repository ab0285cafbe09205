#pragma once
// The command of a one-command job (`ddprun --hosts ...`): starts one agent per host through
// the remote shell (RemoteSession), opening at most `fanout` connections at once; waits until
// every host passed its checks (reachable, the same ddprun, the working directory, the program)
// before telling any of them to start; relays their output; forwards signals in the session;
// and gathers every agent's result. It starts no worker itself. What each host runs is
// cluster/remote_command.hpp's.

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/launch_config.hpp"

namespace ddprun {

struct HostOutcome {
  HostSpec spec;
  int node = 0;               // node rank (the position in the host list)
  bool ready = false;         // passed its checks
  std::string problem;        // why it failed its checks or was lost; empty: none
  nlohmann::json ready_info;  // the ready report: nproc_per_node, pid, ...
  std::optional<nlohmann::json> result;  // the agent's result report
  int code = -1;              // the remote shell's exit code (-1: did not end)
  std::vector<std::string> stderr_tail;  // its last stderr lines
};

struct ClusterResult {
  bool preflight_failed = false;  // nothing was started anywhere
  int signal = 0;                 // this command was stopped by it
  bool elastic = false;
  std::string run_id;
  std::vector<HostOutcome> hosts;
  // The node whose agent ended on its own, leaving an elastic job under its --nnodes minimum,
  // after which this command stopped the others; -1: none.
  int stopped_for = -1;
  double seconds = 0;
};

class ClusterHead {
 public:
  // `env`: this process's environment (forwarded in part); `self`: this executable's path
  // (the default remote ddprun); `cwd`: the workers' working directory.
  ClusterHead(const LaunchConfig& config, std::map<std::string, std::string> env,
              std::string self, std::string cwd);
  ~ClusterHead();
  ClusterHead(const ClusterHead&) = delete;
  ClusterHead& operator=(const ClusterHead&) = delete;

  // Blocks until every host's agent has ended (or, when a check failed, until none started).
  ClusterResult run();
  // Thread-safe: forward `signal` to every agent (a second one ends the connections).
  void on_signal(int signal);

  // The job's store secret, as every agent gets it.
  std::string store_secret() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun
