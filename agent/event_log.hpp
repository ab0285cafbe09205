#pragma once
// --events-file: one JSON object per line for every step of the agent's life (rendezvous,
// workers started, a worker exited, restart, job finished), with monotonic timestamps so that
// benchmarks and users can measure exactly where time went. Thread-safe; a default-constructed
// log writes nothing.

#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace ddprun {

class EventLog {
 public:
  EventLog() = default;
  // Appends to `path`. Throws Error naming the path if it cannot be opened.
  explicit EventLog(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Writes {"event": name, "mono": <CLOCK_MONOTONIC seconds>, "unix": <wall seconds>,
  // "pid": <agent pid>, ...fields} and flushes, so a reader sees each event at once.
  void write(const std::string& name, nlohmann::json fields = nlohmann::json::object());

 private:
  std::mutex mutex_;
  std::FILE* file_ = nullptr;
};

}  // namespace ddprun
