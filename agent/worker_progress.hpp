#pragma once
// When the workers last showed progress, for --hang-timeout. Written from the threads that see
// it (the runner's thread for output, the FileTimer server for requests) with one atomic store;
// read by the agent's loop. The loop can ask to be woken once by the next progress (arm), so
// that a node that told the others it is idle takes it back as soon as its workers move,
// without polling.
//
// The state is shared with the callbacks handed to the runner (sink()), which may run after the
// agent is gone (a worker's child still holding its pipe): they then find no queue to wake.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>

#include "agent/event_queue.hpp"

namespace ddprun {

class WorkerProgress {
 public:
  explicit WorkerProgress(EventQueue& events) : state_(std::make_shared<State>()) {
    state_->events = &events;
  }
  ~WorkerProgress() {
    std::lock_guard lock(state_->mutex);
    state_->events = nullptr;
  }
  WorkerProgress(const WorkerProgress&) = delete;
  WorkerProgress& operator=(const WorkerProgress&) = delete;

  // Any thread: a worker wrote output or sent a timer request.
  void note() { state_->note(); }
  // The same, as a callback that may outlive this object.
  std::function<void()> sink() const {
    return [state = state_] { state->note(); };
  }

  // A new attempt starts: its workers have just started, which counts as progress.
  void restart(int round) {
    state_->round.store(round);
    state_->armed.store(false);
    note();
  }

  Clock::time_point last() const {
    return Clock::time_point(Clock::duration(state_->last.load()));
  }

  // The next note() pushes one kProgress event. Returns false if progress came after `since`
  // already (the caller then acts at once, not on an event that might never come). The store
  // of `armed` and the load of `last` here, like the store of `last` and the load of `armed`
  // in note(), are sequentially consistent, so one of the two sides always sees the other.
  bool arm(Clock::time_point since) {
    state_->armed.store(true);
    if (last() > since) {
      state_->armed.store(false);
      return false;
    }
    return true;
  }

 private:
  struct State {
    std::atomic<Clock::rep> last{0};
    std::atomic<bool> armed{false};
    std::atomic<int> round{0};
    std::mutex mutex;            // guards `events` against the agent's end
    EventQueue* events = nullptr;

    void note() {
      last.store(Clock::now().time_since_epoch().count());
      if (!armed.load() || !armed.exchange(false)) return;
      std::lock_guard lock(mutex);
      if (events == nullptr) return;
      AgentEvent e;
      e.kind = AgentEvent::Kind::kProgress;
      e.round = round.load();
      events->push(std::move(e));
    }
  };
  std::shared_ptr<State> state_;
};

}  // namespace ddprun
