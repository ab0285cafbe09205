#include "monitor/status_publisher.hpp"

#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "monitor/job_monitor.hpp"
#include "monitor/job_view.hpp"

namespace ddprun {

using namespace std::chrono_literals;

StatusPublisher::StatusPublisher(StatusBoard& board, store::StoreOpener open_store,
                                 std::function<void(NodeStatus&)> augment,
                                 std::chrono::milliseconds period,
                                 std::chrono::milliseconds between_attempts)
    : board_(board),
      open_store_(std::move(open_store)),
      augment_(std::move(augment)),
      period_(period),
      between_attempts_(between_attempts),
      thread_([this] { run(); }) {}

StatusPublisher::~StatusPublisher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (interruptible_ != nullptr) interruptible_->interrupt();
  }
  cv_.notify_all();
  board_.close();
  if (thread_.joinable()) thread_.join();
}

void StatusPublisher::finish(std::chrono::milliseconds timeout) {
  // The board has ended: its waiter (this thread, between writes) wakes for good.
  board_.close();
  std::unique_lock lock(mutex_);
  final_ = true;
  cv_.notify_all();
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    stopping_ = true;
    if (interruptible_ != nullptr) interruptible_->interrupt();
  }
}

std::unique_ptr<store::Store> StatusPublisher::open(Deadline deadline) {
  // Each try twice as long as the last: a store slow to answer (a busy etcd) still gets the
  // time it needs, and a store that is gone holds a stop only for the try under way.
  for (auto length = std::chrono::duration_cast<Clock::duration>(kOpenTry);; length *= 2) {
    const auto slice = deadline.min(Deadline::after(length));
    try {
      return open_store_(slice);
    } catch (const std::exception&) {
      // A try that failed early (refused at once) waits out its slice, so that a store that
      // is gone costs one try per slice, not a busy loop.
      std::unique_lock lock(mutex_);
      cv_.wait_until(lock, slice.when(), [&] { return stopping_ || final_; });
      if (stopping_ || final_ || deadline.expired()) throw;
    }
  }
}

bool StatusPublisher::publish(Deadline deadline) {
  try {
    if (!store_) {
      auto store = open(deadline);
      std::lock_guard lock(mutex_);
      if (stopping_) return false;
      store_ = std::move(store);
      interruptible_ = store_.get();
    }
    if (slot_ < 0) slot_ = store_->add(kStatusSlotsKey, 1, deadline) - 1;
    auto status = board_.snapshot();
    if (augment_) augment_(status);
    store_->set(status_record_key(slot_), dump_json(status.to_json()), deadline);
    return true;
  } catch (const std::exception& e) {
    // The store may be gone for good (the job ended) or for a moment: try again next time on a
    // fresh connection, and say so once.
    if (!warned_) {
      spdlog::debug("status: cannot write this node's record to the store: {}", e.what());
      warned_ = true;
    }
    std::lock_guard lock(mutex_);
    interruptible_ = nullptr;
    store_.reset();
    return false;
  }
}

void StatusPublisher::run() {
  // Off the start's and a recovery's hot path: the first record after the agent's first
  // moments (a job that starts within them is not slowed by it), and after a change a short
  // wait, so that a burst of changes (a restart: stopping, restarting, rendezvous, running)
  // becomes one write once it has settled.
  {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, kFirstWrite, [&] { return stopping_ || final_; });
  }
  while (true) {
    const auto seen = board_.version();
    bool last = false;
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      last = final_;
    }
    // The end's record only updates one already written, on the connection it was written on:
    // a job shorter than the first write has none, and a store that went away with the job
    // must not hold this agent's exit for a reconnection's deadline.
    if (last && !store_) break;
    publish(Deadline::after(last ? 1s : 5s));
    if (last) break;
    const auto written = Clock::now();
    board_.wait_for_change(seen, written + period_);
    // At most one write a second, whatever happens, and none in the midst of a change.
    {
      std::unique_lock lock(mutex_);
      cv_.wait_until(lock, std::max(written + 1s, Clock::now() + kSettle),
                     [&] { return stopping_ || final_; });
    }
    // A restart is one write once the workers run again, not one a second on every agent
    // while the store (etcd) is busiest with the restart; a rendezvous that waits for nodes
    // still shows now and then. The end closes the board, which ends this wait.
    board_.wait_between_attempts(written + between_attempts_);
  }
  std::lock_guard lock(mutex_);
  interruptible_ = nullptr;
  done_ = true;
  cv_.notify_all();
}

}  // namespace ddprun
