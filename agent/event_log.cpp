#include "agent/event_log.hpp"

#include <time.h>
#include <unistd.h>

#include <cerrno>

#include <fmt/format.h>

#include "common/error.hpp"
#include "common/limits.hpp"

namespace ddprun {

namespace {

double clock_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
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
  // The agent's own CPU so far, so that a benchmark can tell what one stretch of its life cost.
  fields["cpu"] = process_cpu_seconds();
  auto line = fields.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard lock(mutex_);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace ddprun
