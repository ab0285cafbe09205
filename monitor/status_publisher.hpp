#pragma once
// Keeps this agent's record (agent/status_board.hpp) current in the job's store, where
// `ddprun status --rdzv-endpoint` and a --hosts command read every node's: one set of one key
// per agent when its state changes (at most one a second, a quarter of a second after the
// change, the first one a second after the start) and every `period` otherwise (for the ranks'
// ages and last lines). Between two attempts (a restart, a rendezvous) the record waits for
// the next attempt's start, at most `between_attempts` after the last write. The store's load
// is therefore at most one write per agent per second, and one per `period` while nothing
// happens. It runs on a thread and a store connection of its own; a store it cannot reach
// costs it a retry at the next period, never the agent's work, and holds the agent's end
// no longer than the try to connect under way.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "agent/status_board.hpp"
#include "store/store.hpp"

namespace ddprun {

class StatusPublisher {
 public:
  static constexpr std::chrono::seconds kDefaultPeriod{5};
  static constexpr std::chrono::milliseconds kFirstWrite{1000};
  static constexpr std::chrono::milliseconds kSettle{250};
  static constexpr std::chrono::seconds kBetweenAttempts{5};
  // The first try to open the store; each next one is twice as long.
  static constexpr std::chrono::milliseconds kOpenTry{500};

  // `augment` adds what the board does not know (CPU and memory from /proc).
  StatusPublisher(StatusBoard& board, store::StoreOpener open_store,
                  std::function<void(NodeStatus&)> augment,
                  std::chrono::milliseconds period = kDefaultPeriod,
                  std::chrono::milliseconds between_attempts = kBetweenAttempts);
  ~StatusPublisher();
  StatusPublisher(const StatusPublisher&) = delete;
  StatusPublisher& operator=(const StatusPublisher&) = delete;

  // The run has ended (the board says how): updates the record already written, on its live
  // connection, within `timeout`, and stops. With no record or no connection: stops at once.
  void finish(std::chrono::milliseconds timeout);

 private:
  void run();
  bool publish(Deadline deadline);
  // The store, opened in tries from kOpenTry on until `deadline`, the end of the run or a stop.
  std::unique_ptr<store::Store> open(Deadline deadline);

  StatusBoard& board_;
  store::StoreOpener open_store_;
  std::function<void(NodeStatus&)> augment_;
  std::chrono::milliseconds period_;
  std::chrono::milliseconds between_attempts_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool final_ = false;
  bool done_ = false;
  std::unique_ptr<store::Store> store_;  // the thread's; interrupt() from others is safe
  store::Store* interruptible_ = nullptr;  // guarded by mutex_
  std::int64_t slot_ = -1;
  bool warned_ = false;
  std::thread thread_;
};

}  // namespace ddprun
