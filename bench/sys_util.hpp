#pragma once
// Small system helpers for the benchmarks: ports, file limits, scratch directories, /proc and
// the JSON-lines files that ddprun's --events-file writes.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun::bench {

// A TCP port that was free on 127.0.0.1 a moment ago.
std::uint16_t free_port();

// Raises RLIMIT_NOFILE's soft limit to at least `wanted` (past the hard limit when this process
// may raise that, e.g. as root; else up to it); returns the soft limit now in force.
long raise_nofile(long wanted);

// A fresh directory under $TMPDIR (or /tmp), removed on destruction unless keep() was called.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// The whole file, or "" when it cannot be read.
std::string read_text(const std::string& path);
// Every line that parses as JSON (a line being written may be cut; it is skipped).
std::vector<nlohmann::json> read_json_lines(const std::string& path);
// The events named `event` from a ddprun --events-file, in order.
std::vector<nlohmann::json> events_named(const std::string& path, const std::string& event);
// The first event named `event` in `path` that satisfies `pred`, waiting for it until
// `timeout` (TimeoutError naming `what`). The wait is a harness-side poll; a figure comes from
// the event's own timestamp.
nlohmann::json await_event(const std::string& path, const std::string& event,
                           const std::function<bool(const nlohmann::json&)>& pred,
                           std::chrono::milliseconds timeout, const std::string& what);

// The CLOCK_MONOTONIC stamps bench_worker wrote to `dir` in files named `<prefix>*`.
std::vector<double> read_stamps(const std::string& dir, const std::string& prefix);

// The last `lines` lines of a text file, for error messages.
std::string tail(const std::string& path, int lines);

// A "Key:   N kB" field of /proc/<pid>/status in KiB (VmHWM, VmRSS), or -1 when unreadable
// (the process is gone or a zombie).
long status_kib(pid_t pid, const std::string& field);
// The pids whose parent is `pid` (from /proc/<pid>/task/*/children).
std::vector<pid_t> children_of(pid_t pid);
// CPU time of every thread of a process so far, in seconds (/proc/<pid>/task/*/schedstat).
double process_cpu_s(pid_t pid);
// /proc/<pid>/comm without the newline, or "".
std::string comm_of(pid_t pid);

}  // namespace ddprun::bench
