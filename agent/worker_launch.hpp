#pragma once
// What each local worker of an attempt starts with: its argv, its environment (torchrun's
// variables over the agent's own), its CPU and memory placement, and where its output goes
// (console, files, line prefix), all under the attempt's directory in the log dir:
//
//   <log dir>/attempt_<round>/<local rank>/{stdout.log, stderr.log, error.json, stacks.txt}

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent_context.hpp"
#include "common/launch_config.hpp"
#include "process/process_runner.hpp"
#include "rendezvous/rendezvous_handler.hpp"

namespace ddprun {

// The files of one attempt.
class AttemptDir {
 public:
  AttemptDir(const std::string& log_dir, int round);

  const std::string& path() const { return path_; }
  std::string rank_dir(int local_rank) const;
  std::string error_file(int local_rank) const;  // TORCHELASTIC_ERROR_FILE
  std::string stacks_file(int local_rank) const;

 private:
  std::string path_;
};

// What the agent watches in every worker's output, beyond printing and keeping it.
struct OutputHooks {
  std::function<void()> on_output;  // any output at all (--hang-timeout's progress); optional
  // A rank's last line, for `ddprun status`; optional.
  std::function<std::function<void(std::string_view)>(int local_rank)> on_line;
};

// The launches of this node's workers in `round`, with their directories made and any error
// file of an earlier run there removed. `timer_file` is FileTimer's, "" when none is served.
std::vector<WorkerLaunch> make_worker_launches(const LaunchConfig& config, const AgentContext& ctx,
                                               const Round& round, int master_port,
                                               const AttemptDir& dir,
                                               const std::string& timer_file,
                                               const OutputHooks& hooks);

// The launches a warm standby pool is made from before the first round: this node's workers
// with the configured ranks; only the variables attempt_variables() names differ from a real
// round's. Touches no file.
std::vector<WorkerLaunch> standby_templates(const LaunchConfig& config, const AgentContext& ctx,
                                            const std::string& timer_file);

// The worker variables that change from one attempt or round to the next (a warm standby gets
// them at its handover).
std::vector<std::string> attempt_variables();

}  // namespace ddprun
