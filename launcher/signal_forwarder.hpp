#pragma once
// The signals ddprun handles (SIGTERM, SIGINT, ... or --signals-to-handle), taken from the first
// instant: they are blocked in every thread and received by one thread of their own (sigwait),
// so they never interrupt a system call elsewhere. While a target is attached each signal goes
// to it; before that, a signal ends the process at once with 128+N (no worker exists yet);
// after detach() it is only noted (the run is already stopping).

#include <functional>
#include <memory>
#include <vector>

namespace ddprun {

class SignalForwarder {
 public:
  // Call before any other thread starts, so that every thread inherits the blocked mask.
  explicit SignalForwarder(const std::vector<int>& signals);
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;

  void attach(std::function<void(int)> target);
  // After this returns, the target is never called again.
  void detach();

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with the signal thread, which outlives this object
};

}  // namespace ddprun
