#pragma once
// Blocks in the store (a server-side wait, on a connection of its own) until a round's outcome
// is decided by any node, and reports it to the agent's event queue at once: a failure
// anywhere reaches every agent the moment it is published. Reports kStoreLost when the store
// goes away. Destroying the watcher interrupts its wait and joins its thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/event_queue.hpp"
#include "store/store.hpp"

namespace ddprun {

class OutcomeWatcher {
 public:
  // How long one wait in the store lasts before it is asked again, so that each wait is
  // bounded like every other (a get sent ahead for the watcher waits as long).
  static constexpr std::chrono::hours kWaitBound{1};

  // Opens a fresh connection (with its own deadline).
  using Reopen = std::function<std::unique_ptr<store::Store>()>;

  // `reopen`, for a connection kept from an earlier round: used once if it turns out closed.
  OutcomeWatcher(std::unique_ptr<store::Store> store, std::string outcome_key, int round,
                 EventQueue& events, Reopen reopen = {});
  ~OutcomeWatcher();
  OutcomeWatcher(const OutcomeWatcher&) = delete;
  OutcomeWatcher& operator=(const OutcomeWatcher&) = delete;

  // Once the watcher has read the outcome, its connection has no request in flight: it is
  // handed back (the thread joined) for the next round's watcher, which then opens none.
  // nullptr while it still waits, or after an error.
  std::unique_ptr<store::Store> release_if_idle();
  // The same, once the watcher is done or `deadline` has passed (an outcome this node
  // published: the watcher's answer is on its way).
  std::unique_ptr<store::Store> release_when_idle(Deadline deadline);

 private:
  std::unique_ptr<store::Store> store_;  // replaced only under mutex_, by the thread
  Reopen reopen_;
  std::mutex mutex_;
  bool stopping_ = false;  // under mutex_
  bool done_ = false;      // under mutex_: the thread has nothing more to do
  std::condition_variable done_changed_;
  std::atomic<bool> idle_{false};
  std::thread thread_;
};

}  // namespace ddprun
