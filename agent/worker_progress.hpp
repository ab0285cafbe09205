#pragma once
// When the workers last showed progress, for --hang-timeout. Written from the threads that see
// it (the runner's thread for output, the FileTimer server for requests) with one atomic store;
// read by the agent's loop. The loop can ask to be woken once by the next progress (arm), so
// that a node that told the others it is idle takes it back as soon as its workers move,
// without polling.

#include <atomic>

#include "agent/event_queue.hpp"

namespace ddprun {

class WorkerProgress {
 public:
  explicit WorkerProgress(EventQueue& events) : events_(events) {}

  // Any thread: a worker wrote output or sent a timer request.
  void note() {
    last_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    if (armed_.load(std::memory_order_relaxed) && armed_.exchange(false)) {
      AgentEvent e;
      e.kind = AgentEvent::Kind::kProgress;
      e.round = round_.load();
      events_.push(std::move(e));
    }
  }

  // A new attempt starts: its workers have just started, which counts as progress.
  void restart(int round) {
    round_.store(round);
    armed_.store(false);
    note();
  }

  Clock::time_point last() const {
    return Clock::time_point(Clock::duration(last_.load(std::memory_order_relaxed)));
  }

  // The next note() pushes one kProgress event. Returns false if progress came after `since`
  // already (the caller then acts at once, not on an event that might never come).
  bool arm(Clock::time_point since) {
    armed_.store(true);
    if (last() > since) {
      armed_.store(false);
      return false;
    }
    return true;
  }
  void disarm() { armed_.store(false); }

 private:
  EventQueue& events_;
  std::atomic<Clock::rep> last_{0};
  std::atomic<bool> armed_{false};
  std::atomic<int> round_{0};
};

}  // namespace ddprun
