#pragma once
// Keep-alive over the store, for the static and the c10d rendezvous alike. Every member bumps
// its own counter each interval and watches one other member, its successor in group-rank
// order, reading its counter kChecksPerInterval times per interval, so the whole job costs O(n)
// store operations per interval. A successor whose counter has not changed for
// interval x max_attempts (time since the change was seen, not a count of checks) is declared
// dead, once. Runs on its own thread with its own store connection.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "rendezvous/rendezvous_handler.hpp"
#include "rendezvous/store.hpp"

namespace ddprun {

// What a member writes in place of its counter when it leaves on purpose (its work is done),
// so that its silence is not taken for death.
inline constexpr const char* kHeartbeatDone = "done";
// How often per keep-alive interval a member looks at the member it watches (it beats once).
inline constexpr int kChecksPerInterval = 4;

struct KeepAliveTiming {
  std::chrono::milliseconds interval{5'000};
  int max_attempts = 3;
  std::chrono::milliseconds read_timeout{60'000};
};

struct HeartbeatOptions {
  std::string prefix;  // store keys: <prefix>/hb/<group rank>
  int group_rank = 0;
  int members = 1;
  KeepAliveTiming timing;
};

class Heartbeat final : public KeepAlive {
 public:
  // `on_dead(group_rank)` runs when the watched member stopped beating; `on_error(message)` when
  // the store cannot be reached. Each is called at most once, from the heartbeat thread.
  Heartbeat(std::unique_ptr<Store> store, HeartbeatOptions options,
            RendezvousHandler::LostCallback on_dead, RendezvousHandler::ErrorCallback on_error);
  // Stops the thread (interrupting a store call in progress) and joins it.
  ~Heartbeat() override;
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();

  std::unique_ptr<Store> store_;
  HeartbeatOptions options_;
  RendezvousHandler::LostCallback on_dead_;
  RendezvousHandler::ErrorCallback on_error_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The ring keep-alive of `round` on a connection of its own; nullptr for a round of one node.
std::unique_ptr<KeepAlive> ring_keep_alive(const StoreOpener& open_store, const Round& round,
                                           const KeepAliveTiming& timing,
                                           RendezvousHandler::LostCallback on_lost,
                                           RendezvousHandler::ErrorCallback on_error);

// "<prefix>/hb/<group rank>": the key a member's liveness lives at.
std::string beat_key(const std::string& prefix, int group_rank);

// Marks this node of `round` as gone on purpose (see kHeartbeatDone).
void mark_left_on_purpose(Store& store, const Round& round, Deadline deadline);

}  // namespace ddprun
