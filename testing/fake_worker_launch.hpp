#pragma once
// Fake workers (tests/fake_worker) as the process runner starts them, and what the tests read
// back: the exits the runner reports, and pids the workers wrote. Header-only; the including
// target defines FAKE_WORKER_BINARY, the fake worker's path.

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/worker_env.hpp"
#include "process/process_runner.hpp"
#include "testing/test_util.hpp"

#ifndef FAKE_WORKER_BINARY
#error "FAKE_WORKER_BINARY must be the path of the fake worker"
#endif

namespace ddprun::test {

// What one fake worker should do, and as whom: Fake("exit:3").rank(1, 3).launch().
class Fake {
 public:
  explicit Fake(std::string mode = "succeed") : mode_(std::move(mode)) {}

  Fake& rank(int local_rank, int local_world_size) {
    local_rank_ = local_rank;
    local_world_size_ = local_world_size;
    return *this;
  }
  Fake& restart(int count) {
    restart_count_ = count;
    return *this;
  }
  Fake& error_file(std::string path) {
    error_file_ = std::move(path);
    return *this;
  }
  Fake& env(const std::string& key, std::string value) {
    extra_env_[key] = std::move(value);
    return *this;
  }

  ddprun::WorkerLaunch launch() const {
    ddprun::WorkerEnvInput in;
    in.ranks = ddprun::assign_ranks({local_world_size_}, 0);
    in.local_rank = local_rank_;
    in.master_addr = "127.0.0.1";
    in.master_port = 29500;
    in.restart_count = restart_count_;
    in.error_file = error_file_;
    const char* path = std::getenv("PATH");
    ddprun::EnvMap base{{"PATH", path ? path : "/usr/bin:/bin"}};
    for (const auto& [k, v] : extra_env_) base[k] = v;

    ddprun::WorkerLaunch w;
    w.local_rank = local_rank_;
    w.rank = in.ranks.global_rank(local_rank_);
    w.argv = {FAKE_WORKER_BINARY, "--mode=" + mode_};
    w.env = ddprun::to_env_strings(ddprun::build_worker_env(base, in));
    // Tests read what they need from files and stderr_tail; the console stays clean.
    w.output.stdout_to_console = false;
    w.output.stderr_to_console = false;
    return w;
  }

 private:
  std::string mode_;
  int local_rank_ = 0;
  int local_world_size_ = 1;
  int restart_count_ = 0;
  std::string error_file_;
  ddprun::EnvMap extra_env_;
};

// Exits reported by the runner (from its own thread).
class ExitLog {
 public:
  ddprun::ProcessRunner::ExitCallback callback() {
    return [this](const ddprun::WorkerExit& e) {
      std::lock_guard lock(mutex_);
      exits_.push_back(e);
      changed_.notify_all();
    };
  }

  bool wait_for(std::size_t count,
                std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return exits_.size() >= count; });
  }

  // Sorted by local rank.
  std::vector<ddprun::WorkerExit> exits() const {
    std::lock_guard lock(mutex_);
    auto out = exits_;
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.local_rank < b.local_rank; });
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<ddprun::WorkerExit> exits_;
};

// Pids from a file that processes append "pid\n" lines to; only newline-terminated lines count.
inline std::vector<pid_t> read_pids(const std::string& path) {
  const std::string content = read_file(path);
  std::vector<pid_t> pids;
  std::size_t start = 0;
  for (auto nl = content.find('\n'); nl != std::string::npos; nl = content.find('\n', start)) {
    pids.push_back(static_cast<pid_t>(std::stol(content.substr(start, nl - start))));
    start = nl + 1;
  }
  return pids;
}

}  // namespace ddprun::test
