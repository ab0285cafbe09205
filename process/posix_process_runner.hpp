#pragma once
// The real ProcessRunner: Boost.Process v2 on one Asio thread. Each worker runs in its own
// process group with a parent-death signal; its exit is noticed through a pidfd the moment it
// happens; its output is read line by line and routed to the console and/or log files.

#include <memory>
#include <optional>

#include "process/process_runner.hpp"
#include "process/standby.hpp"

namespace ddprun {

class OrphanGuard;

class PosixProcessRunner final : public ProcessRunner {
 public:
  // `guard` (optional, not owned) learns every worker process group. A stop() that takes long
  // says which ranks have not exited, first after `progress_interval` (common/progress.hpp).
  // `standby`: keep warm standby workers (process/standby.hpp); nullopt: every start is cold.
  explicit PosixProcessRunner(OrphanGuard* guard = nullptr,
                              std::chrono::milliseconds progress_interval = std::chrono::seconds(10),
                              std::optional<StandbyOptions> standby = std::nullopt);
  // Stops every worker (SIGKILL after a short grace) and joins the runner thread.
  ~PosixProcessRunner() override;

  std::vector<int> start(const std::vector<WorkerLaunch>& workers, ExitCallback on_exit) override;
  void keep_standbys(const std::vector<WorkerLaunch>& templates) override;
  using ProcessRunner::stop;
  std::vector<UnreapedWorker> stop(int signal, Clock::duration grace,
                                   const std::vector<int>& spared) override;
  std::vector<StackCapture> capture_stacks(const std::vector<StackTarget>& targets,
                                           Deadline deadline) override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun
