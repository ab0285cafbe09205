#pragma once
// What wakes the agent's main loop, from the threads that notice it: the runner's thread
// (a worker exited, or moved again), the outcome watcher (the round's outcome was decided, or
// the store is gone), the keep-alive (a member stopped answering), the FileTimer server and the
// signal thread. Thread-safe; pop()
// waits on a condition variable, never polls.

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include "common/deadline.hpp"
#include "process/process_runner.hpp"

namespace ddprun {

struct AgentEvent {
  enum class Kind {
    kWorkerExited,
    kOutcome,
    kSignal,
    kStoreLost,
    kNodeLost,
    kProgress,      // a worker moved again after this node said it was idle (--hang-timeout)
    kTimerExpired,  // a worker's FileTimer expired (round -1: matched by pid)
  };
  Kind kind = Kind::kWorkerExited;
  int round = 0;      // which round it belongs to (stale events are dropped)
  WorkerExit exit;    // kWorkerExited
  std::string text;   // kOutcome: the outcome value; kStoreLost: the error
  int signal = 0;     // kSignal
  int node = -1;      // kNodeLost: the group rank that stopped answering
  // kTimerExpired: the worker's pid, its timer's scope, when it expired (unix seconds) and the
  // signal the worker asked to be sent.
  int pid = 0;
  double expired_at = 0;
  int timer_signal = 0;
};

class EventQueue {
 public:
  void push(AgentEvent event) {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(std::move(event));
    }
    ready_.notify_one();
  }

  // The oldest event, or nullopt when the deadline passed first.
  std::optional<AgentEvent> pop(Deadline deadline) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_until(lock, deadline.when(), [&] { return !events_.empty(); })) {
      return std::nullopt;
    }
    auto event = std::move(events_.front());
    events_.pop_front();
    return event;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<AgentEvent> events_;
};

}  // namespace ddprun
