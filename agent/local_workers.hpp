#pragma once
// This node's workers in one attempt, by local rank, as the attempt has seen them start and
// end: what hang detection and the stacks need to know of them.

#include <optional>
#include <vector>

#include "common/failure_record.hpp"
#include "process/process_runner.hpp"

namespace ddprun {

struct LocalWorkers {
  std::vector<int> pids;        // by local rank
  std::vector<bool> exited;     // by local rank
  std::vector<std::optional<Failure>> failed;  // by local rank: how it failed on its own
  int running = 0;              // not yet exited

  void started(std::vector<int> started_pids) {
    pids = std::move(started_pids);
    running = static_cast<int>(pids.size());
    exited.assign(pids.size(), false);
    failed.assign(pids.size(), std::nullopt);
  }

  void count_exit(const WorkerExit& exit) {
    --running;
    if (valid(exit.local_rank)) exited[exit.local_rank] = true;
  }

  void record_failure(int local_rank, Failure f) {
    if (valid(local_rank)) failed[local_rank] = std::move(f);
  }

  // The local rank of a worker still running with this pid; -1 when there is none.
  int live_local_rank(int pid) const {
    for (std::size_t l = 0; l < pids.size(); ++l) {
      if (pids[l] == pid && !exited[l]) return static_cast<int>(l);
    }
    return -1;
  }

 private:
  bool valid(int local_rank) const {
    return local_rank >= 0 && local_rank < static_cast<int>(exited.size());
  }
};

}  // namespace ddprun
