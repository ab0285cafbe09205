#include "agent/event_log.hpp"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun {

namespace {

double clock_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// User plus system CPU of every thread of this process so far (exited threads included, its
// children not), so that a benchmark can tell what one stretch of the agent's life cost it.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

}  // namespace

EventLog::EventLog(const std::string& path) {
  file_ = std::fopen(path.c_str(), "a");
  if (!file_) {
    throw ConfigError(
        fmt::format("--events-file={}: cannot open it: {}", path, errno_message(errno)));
  }
}

EventLog::~EventLog() {
  if (file_) std::fclose(file_);
}

void EventLog::write(const std::string& name, nlohmann::json fields) {
  if (!file_) return;
  // CLOCK_MONOTONIC is system-wide, so events of several agents on one machine line up.
  fields["event"] = name;
  fields["mono"] = clock_seconds(CLOCK_MONOTONIC);
  fields["unix"] = clock_seconds(CLOCK_REALTIME);
  fields["pid"] = static_cast<int>(getpid());
  fields["cpu"] = process_cpu_seconds();
  auto line = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace ddprun
