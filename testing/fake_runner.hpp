#pragma once
// A ProcessRunner with no processes, for unit tests of the agent's state machine: the test
// decides when and how each "worker" exits.

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <vector>

#include "process/process_runner.hpp"

namespace ddprun::test {

class FakeRunner final : public ProcessRunner {
 public:
  std::vector<int> start(const std::vector<WorkerLaunch>& workers, ExitCallback on_exit) override {
    std::lock_guard lock(mutex_);
    launches_.push_back(workers);
    on_exit_ = std::move(on_exit);
    running_.assign(workers.size(), true);
    std::vector<int> pids;
    for (std::size_t i = 0; i < workers.size(); ++i) pids.push_back(1000 * starts() + static_cast<int>(i));
    changed_.notify_all();
    return pids;
  }

  // Like the real runner: whatever still runs is "killed" by the signal and reported.
  using ProcessRunner::stop;
  // A worker set with leave_unreaped survives the next stop, which returns it.
  std::vector<UnreapedWorker> stop(int signal, Clock::duration,
                                   const std::vector<int>&) override {
    std::unique_lock lock(mutex_);
    stop_signals_.push_back(signal);
    std::vector<UnreapedWorker> unreaped;
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (!running_[i]) continue;
      const int local = static_cast<int>(i);
      if (std::find(unreaped_.begin(), unreaped_.end(), local) != unreaped_.end()) {
        running_[i] = false;  // never reported, as a process stuck in the kernel
        unreaped.push_back({local, launches_.back()[i].rank, 4242 + local, "state D in fake"});
        continue;
      }
      report_locked(lock, local, 0, signal);
    }
    unreaped_.clear();
    return unreaped;
  }
  void leave_unreaped(std::vector<int> local_ranks) {
    std::lock_guard lock(mutex_);
    unreaped_ = std::move(local_ranks);
  }

  // Writes the stacks set with set_stacks (by local rank) as the debugger's output; a worker
  // without one gets an error, as an unreadable process would.
  std::vector<StackCapture> capture_stacks(const std::vector<StackTarget>& targets,
                                           Deadline) override {
    std::lock_guard lock(mutex_);
    std::vector<StackCapture> out;
    for (const auto& t : targets) {
      StackCapture c;
      c.pid = t.pid;
      c.file = t.file;
      const auto local = static_cast<std::size_t>(t.pid % 1000);
      captured_pids_.push_back(t.pid);
      if (local < stacks_.size() && !stacks_[local].empty()) {
        std::ofstream(t.file) << stacks_[local];
        c.ok = true;
      } else {
        c.error = "the fake runner has no stack for this worker";
      }
      out.push_back(std::move(c));
    }
    return out;
  }
  void set_stacks(std::vector<std::string> by_local_rank) {
    std::lock_guard lock(mutex_);
    stacks_ = std::move(by_local_rank);
  }
  std::vector<int> captured_pids() {
    std::lock_guard lock(mutex_);
    return captured_pids_;
  }

  // Blocks until start() was called `n` times in all (false after the timeout).
  bool wait_for_start(int n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return starts() >= n; });
  }

  // The worker with this local rank exits now.
  void exit_worker(int local_rank, int code, int signal = 0) {
    std::unique_lock lock(mutex_);
    report_locked(lock, local_rank, code, signal);
  }
  void exit_all(int code) {
    std::unique_lock lock(mutex_);
    for (std::size_t i = 0; i < running_.size(); ++i) {
      if (running_[i]) report_locked(lock, static_cast<int>(i), code, 0);
    }
  }

  // What the next reported exits carry as their last stderr lines.
  void set_stderr_tail(std::vector<std::string> tail) {
    std::lock_guard lock(mutex_);
    tail_ = std::move(tail);
  }

  int starts() const { return static_cast<int>(launches_.size()); }
  std::vector<std::vector<WorkerLaunch>> launches() {
    std::lock_guard lock(mutex_);
    return launches_;
  }
  std::vector<int> stop_signals() {
    std::lock_guard lock(mutex_);
    return stop_signals_;
  }

 private:
  void report_locked(std::unique_lock<std::mutex>& lock, int local_rank, int code, int signal) {
    auto& launch = launches_.back()[static_cast<std::size_t>(local_rank)];
    running_[static_cast<std::size_t>(local_rank)] = false;
    WorkerExit e;
    e.local_rank = local_rank;
    e.rank = launch.rank;
    e.pid = 4242 + local_rank;
    e.exit_code = code;
    e.signal = signal;
    e.when = Clock::now();
    e.stderr_tail = tail_.empty()
                        ? std::vector<std::string>{"fake stderr of local rank " +
                                                   std::to_string(local_rank)}
                        : tail_;
    auto callback = on_exit_;
    lock.unlock();
    callback(e);
    lock.lock();
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::vector<WorkerLaunch>> launches_;
  std::vector<bool> running_;
  std::vector<int> stop_signals_;
  std::vector<int> unreaped_;
  std::vector<std::string> tail_;
  std::vector<std::string> stacks_;
  std::vector<int> captured_pids_;
  ExitCallback on_exit_;
};

}  // namespace ddprun::test
