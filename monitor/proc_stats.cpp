#include "monitor/proc_stats.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/deadline.hpp"
#include "common/failure_record.hpp"
#include "process/exit_watch.hpp"

namespace ddprun {

std::optional<ProcUsage> read_proc_usage(int pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return std::nullopt;
  // The command name (field 2) is in parentheses and may hold spaces: fields after the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  // Fields 3.. : utime is field 14, stime 15, starttime 22, rss (pages) 24.
  double utime = 0, stime = 0, start = 0;
  std::int64_t rss_pages = 0;
  for (int n = 3; n <= 24 && rest >> field; ++n) {
    if (n == 14) utime = std::stod(field);
    if (n == 15) stime = std::stod(field);
    if (n == 22) start = std::stod(field);
    if (n == 24) rss_pages = std::stoll(field);
  }
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  static const auto page = sysconf(_SC_PAGESIZE);
  double uptime = 0;
  std::ifstream("/proc/uptime") >> uptime;
  ProcUsage u;
  u.cpu_seconds = (utime + stime) / ticks;
  u.rss_bytes = rss_pages * page;
  u.age_seconds = std::max(0.0, uptime - start / ticks);
  return u;
}

void CpuSampler::fill(NodeStatus& status) {
  const double now = std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  std::map<int, Last> seen;
  for (auto& r : status.ranks) {
    // A worker that cannot run (SIGSTOP, Ctrl-Z) looks like a hang: its state says why.
    if (r.state == "running" && r.pid > 0) {
      if (const int stop = stop_signal(r.pid)) r.state = "stopped by " + signal_name(stop);
    }
    const auto usage = read_proc_usage(r.pid);
    if (!usage) continue;
    r.cpu_seconds = usage->cpu_seconds;
    r.rss_bytes = usage->rss_bytes;
    const auto last = last_.find(r.pid);
    if (last == last_.end()) {
      // The first look: its life so far.
      r.cpu_percent = usage->age_seconds > 0 ? 100.0 * usage->cpu_seconds / usage->age_seconds : 0;
      seen[r.pid] = Last{usage->cpu_seconds, now, r.cpu_percent};
    } else if (now - last->second.at > 0.2) {
      r.cpu_percent = 100.0 * (usage->cpu_seconds - last->second.cpu_seconds) /
                      (now - last->second.at);
      seen[r.pid] = Last{usage->cpu_seconds, now, r.cpu_percent};
    } else {
      // Asked again within moments (too short an interval to measure): the last interval's.
      r.cpu_percent = last->second.percent;
      seen[r.pid] = last->second;
    }
  }
  last_ = std::move(seen);
}

}  // namespace ddprun
