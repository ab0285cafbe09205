#pragma once
// Keep-alive for elastic rounds. Every member bumps its own counter in the store each interval
// and watches one other member, its successor in group-rank order, so the whole job costs O(n)
// store operations per interval. A successor whose counter has not moved for max_attempts
// intervals is declared dead (once). Runs on its own thread with its own store connection.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/store.hpp"

namespace ddprun {

// What a member writes in place of its counter when it leaves on purpose (its work is done),
// so that its silence is not taken for death.
inline constexpr const char* kHeartbeatDone = "done";

struct HeartbeatOptions {
  std::string prefix;  // store keys: <prefix>/hb/<group rank>
  int group_rank = 0;
  int members = 1;
  std::chrono::milliseconds interval{5'000};
  int max_attempts = 3;
  std::chrono::milliseconds read_timeout{60'000};
};

class Heartbeat {
 public:
  // `on_dead(group_rank, store)` runs when the watched member stopped beating, with the
  // heartbeat's own connection (interrupted if the heartbeat is stopped meanwhile);
  // `on_error(message)` when the store cannot be reached. Each is called at most once, from the
  // heartbeat thread.
  using DeadCallback = std::function<void(int, Store&)>;
  Heartbeat(std::unique_ptr<Store> store, HeartbeatOptions options, DeadCallback on_dead,
            std::function<void(std::string)> on_error);
  // Stops the thread (interrupting a store call in progress) and joins it.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();

  std::unique_ptr<Store> store_;
  HeartbeatOptions options_;
  DeadCallback on_dead_;
  std::function<void(std::string)> on_error_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddprun
