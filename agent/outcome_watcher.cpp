#include "agent/outcome_watcher.hpp"

#include <utility>

#include "common/error.hpp"

namespace ddprun {

OutcomeWatcher::OutcomeWatcher(std::unique_ptr<store::Store> store, std::string outcome_key,
                               int round, EventQueue& events, Reopen reopen)
    : store_(std::move(store)), reopen_(std::move(reopen)) {
  thread_ = std::thread([this, key = std::move(outcome_key), round, &events] {
    AgentEvent e;
    e.round = round;
    // However the thread ends, release_when_idle stops waiting.
    struct Done {
      OutcomeWatcher& w;
      ~Done() {
        {
          std::lock_guard lock(w.mutex_);
          w.done_ = true;
        }
        w.done_changed_.notify_all();
      }
    } done{*this};
    try {
      while (true) {
        try {
          e.text = store_->get(key, Deadline::after(kWaitBound));
          e.kind = AgentEvent::Kind::kOutcome;
          idle_ = true;
          break;
        } catch (const TimeoutError&) {
        } catch (const ConnectionError&) {
          // A connection kept from the last round may have been closed while it sat idle: one
          // fresh connection, before calling the store lost.
          if (!reopen_) throw;
          auto fresh = std::exchange(reopen_, nullptr)();
          std::lock_guard lock(mutex_);
          if (stopping_) return;
          store_ = std::move(fresh);
        }
      }
    } catch (const InterruptedError&) {
      return;
    } catch (const Error& ex) {
      e.kind = AgentEvent::Kind::kStoreLost;
      e.text = ex.what();
    }
    events.push(e);
  });
}

std::unique_ptr<store::Store> OutcomeWatcher::release_if_idle() {
  if (!idle_) return nullptr;
  thread_.join();
  return std::move(store_);
}

std::unique_ptr<store::Store> OutcomeWatcher::release_when_idle(Deadline deadline) {
  {
    std::unique_lock lock(mutex_);
    done_changed_.wait_until(lock, deadline.when(), [this] { return done_; });
  }
  return release_if_idle();
}

OutcomeWatcher::~OutcomeWatcher() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    store_->interrupt();
  }
  thread_.join();
}

}  // namespace ddprun
