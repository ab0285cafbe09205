#include "agent/outcome_watcher.hpp"

#include "common/error.hpp"

namespace ddprun {

OutcomeWatcher::OutcomeWatcher(std::unique_ptr<store::Store> store, std::string outcome_key, int round,
                               EventQueue& events)
    : store_(std::move(store)) {
  thread_ = std::thread([this, key = std::move(outcome_key), round, &events] {
    AgentEvent e;
    e.round = round;
    try {
      // Re-armed every hour so that each wait is bounded like every other.
      while (true) {
        try {
          e.text = store_->get(key, Deadline::after(std::chrono::hours(1)));
          e.kind = AgentEvent::Kind::kOutcome;
          idle_ = true;
          break;
        } catch (const TimeoutError&) {
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

OutcomeWatcher::~OutcomeWatcher() {
  if (!thread_.joinable()) return;
  store_->interrupt();
  thread_.join();
}

}  // namespace ddprun
