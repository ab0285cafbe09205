#pragma once
// A live process's CPU time and resident memory, read from /proc, and CPU use as a percentage
// of one core over the time since the previous reading (or the process's life, the first time).

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "agent/status_board.hpp"

namespace ddprun {

struct ProcUsage {
  double cpu_seconds = 0;   // user + system, of the process itself (not its children)
  std::int64_t rss_bytes = 0;
  double age_seconds = 0;   // since the process started
};

// Nullopt when the process is gone or /proc cannot be read.
std::optional<ProcUsage> read_proc_usage(int pid);

// Fills cpu_seconds, cpu_percent and rss_bytes of each rank with a pid, and makes the state of
// a running rank that is stopped "stopped by SIGSTOP" (or the signal that stopped it): only
// for this agent's own record, whose ranks are its children. Thread-safe: keeps the
// previous reading of each pid (bounded by the pids it is given, forgotten when they go).
class CpuSampler {
 public:
  void fill(NodeStatus& status);

 private:
  struct Last {
    double cpu_seconds;
    double at;        // monotonic seconds
    double percent;   // over the interval that ended at `at`
  };
  std::mutex mutex_;
  std::map<int, Last> last_;
};

}  // namespace ddprun
