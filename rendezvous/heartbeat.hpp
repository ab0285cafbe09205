#pragma once
// Keep-alive over the store, for the static and the c10d rendezvous alike. Every member beats
// once per interval and watches one other member, its successor in group-rank order, so the
// whole job costs O(n) store operations per interval. A successor that has not beaten for
// interval x max_attempts of time is declared dead, once. Runs on its own thread with its own
// store connection.
//
// A beat writes the member's next count to its counter, <prefix>/hb/<g>, together with the
// wake-up key <prefix>/hb/<g>/<count> in one request, and erases the wake-up key of two beats
// before. Only the member writes its counter: it reads it once when its ring starts (a ring
// formed again on the same keys counts on) and keeps the count itself. The watcher does not
// poll: it blocks on the wake-up key of the next beat, so it learns of a beat within a round trip of it
// and of a death at the deadline itself, whatever the two members' phases. The counter is the
// truth: at the deadline the watcher reads it before declaring anything (a watcher that fell
// more than a beat behind finds its wake-up key erased and catches up from the counter).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/rendezvous_handler.hpp"
#include "store/store.hpp"

namespace ddprun {

// What a member writes in place of its counter when it leaves on purpose (its work is done),
// so that its silence is not taken for death.
inline constexpr const char* kHeartbeatDone = "done";

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
  Heartbeat(std::unique_ptr<store::Store> store, HeartbeatOptions options,
            RendezvousHandler::LostCallback on_dead, RendezvousHandler::ErrorCallback on_error);
  // Stops the thread (interrupting a store call in progress) and joins it.
  ~Heartbeat() override;
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void run();

  std::unique_ptr<store::Store> store_;
  HeartbeatOptions options_;
  RendezvousHandler::LostCallback on_dead_;
  RendezvousHandler::ErrorCallback on_error_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// Where a keep-alive kept across attempts reports: the attempt attached now, if any. A watch
// that has reported (a death, an error) or ended watches no more and takes no attempt: the
// next one forms a new watch, with listeners of its own. A report while no attempt is attached
// is not kept, since it may be stale (a member whose own ring lost its connection between
// attempts stops beating until it attaches again); the watch formed again finds a member that
// is really gone within its deadline. The callbacks run under the lock, so that a handle being
// destroyed on the agent's thread waits for a call in progress instead of racing it.
class RingListeners {
 public:
  // When the watch still watches, its reports go to these callbacks from now on, until
  // detach() with the attach's number (nullopt: it watches no more). The check and the attach
  // are one step, so that no report falls between them.
  std::optional<std::uint64_t> attach(const RendezvousHandler::LostCallback& on_lost,
                                      const RendezvousHandler::ErrorCallback& on_error);
  // Takes off the callbacks of attach number `attached`, unless a later attach replaced them
  // (an earlier attempt's handle outliving the next attach must not silence it).
  void detach(std::uint64_t attached);

  // An attempt's attach to a kept watch whose listeners are `kept` (null: no watch): to them
  // while the watch still watches, else to new listeners (`renewed`), on which the caller then
  // starts a new watch. Attached before that watch starts, nothing it says is lost, and a late
  // word of the old one reaches nobody.
  struct Attached {
    std::shared_ptr<RingListeners> listeners;
    std::uint64_t number = 0;
    bool renewed = false;
  };
  static Attached attach_kept(std::shared_ptr<RingListeners> kept,
                              const RendezvousHandler::LostCallback& on_lost,
                              const RendezvousHandler::ErrorCallback& on_error);

  // From the watch's thread.
  void lost(int group_rank);
  void error(std::string message);
  void ended();  // the watched member left on purpose: nothing more to watch

 private:
  std::mutex mutex_;
  RendezvousHandler::LostCallback on_lost_;
  RendezvousHandler::ErrorCallback on_error_;
  std::uint64_t attached_ = 0;  // the last attach's number
  bool spent_ = false;
};

// A ring kept for the whole job, for a membership that never changes (the static rendezvous):
// the ring of one attempt would be the ring of the next, and forming it anew costs every node a
// connection and four requests on the recovery's path, times N on the store's host. Each attempt
// attaches its callbacks for as long as the returned handle lives. A ring that has reported (a
// death, or a store error: it watches no more), to an attempt or between attempts, is formed
// again at the next attach, on the same keys, as a ring of that attempt's own would be.
class StandingRing {
 public:
  // Opens its connection and starts beating; throws what `open_store` throws.
  StandingRing(store::StoreOpener open_store, HeartbeatOptions options);
  ~StandingRing();
  StandingRing(const StandingRing&) = delete;
  StandingRing& operator=(const StandingRing&) = delete;

  std::unique_ptr<KeepAlive> attach(RendezvousHandler::LostCallback on_lost,
                                    RendezvousHandler::ErrorCallback on_error);

  // Which ring it is: its keys, this member's place and the member count.
  const HeartbeatOptions& options() const { return options_; }

 private:
  class Handle;
  void form();

  store::StoreOpener open_store_;
  HeartbeatOptions options_;
  std::shared_ptr<RingListeners> listeners_;
  std::unique_ptr<Heartbeat> heartbeat_;
};

// The ring this node takes part in, kept from one round to the next while it is the same ring:
// the same keys (Round::keep_alive_prefix), this node at the same place among as many members.
// A static job's ring is the job's; an elastic round keeps the last round's ring when its closer
// found the same members in the same order, and forms its own otherwise.
class RingKeeper {
 public:
  // The keep-alive of `round` (nullptr for a round of one node), on the kept ring when it is
  // the same, else on a new one (a connection of its own).
  std::unique_ptr<KeepAlive> attach(const store::StoreOpener& open_store, const Round& round,
                                    const KeepAliveTiming& timing,
                                    RendezvousHandler::LostCallback on_lost,
                                    RendezvousHandler::ErrorCallback on_error);
  // Stops the ring: this node leaves, or the job is over for it.
  void stop() { ring_.reset(); }

 private:
  std::unique_ptr<StandingRing> ring_;
};

// "<prefix>/hb/<group rank>": the key a member's beat counter lives at.
std::string beat_key(const std::string& prefix, int group_rank);

// Beat number `count` of the member whose counter is at `key`: the counter and its wake-up key
// (see above).
void beat(store::Store& store, const std::string& key, std::int64_t count, Deadline deadline);

// Marks this node of `round`'s ring as gone on purpose (see kHeartbeatDone).
void mark_left_on_purpose(store::Store& store, const Round& round, Deadline deadline);

}  // namespace ddprun
