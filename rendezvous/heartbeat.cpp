#include "rendezvous/heartbeat.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

std::string beat_key(const std::string& prefix, int group_rank) {
  return fmt::format("{}/hb/{}", prefix, group_rank);
}

Heartbeat::Heartbeat(std::unique_ptr<Store> store, HeartbeatOptions options,
                     RendezvousHandler::LostCallback on_dead,
                     RendezvousHandler::ErrorCallback on_error)
    : store_(std::move(store)),
      options_(std::move(options)),
      on_dead_(std::move(on_dead)),
      on_error_(std::move(on_error)) {
  thread_ = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  store_->interrupt();
  thread_.join();
}

void Heartbeat::run() {
  const auto& o = options_;
  const auto& t = o.timing;
  const auto mine = beat_key(o.prefix, o.group_rank);
  const int watched = (o.group_rank + 1) % o.members;
  const auto theirs = beat_key(o.prefix, watched);
  // Silence is judged by time, not by counting checks: the watched member is dead once its
  // counter has not changed for interval x max_attempts, and it is looked at kChecksPerInterval
  // times per interval, so a death is seen within a fraction of an interval of that deadline
  // whatever the two members' phases.
  const auto silence_limit = t.interval * t.max_attempts;
  const auto tick = std::max<std::chrono::milliseconds>(t.interval / kChecksPerInterval,
                                                        std::chrono::milliseconds(1));
  std::optional<std::string> last_seen;
  auto last_change = Clock::now();
  auto next_beat = Clock::now();
  bool reported = false;
  while (true) {
    try {
      if (Clock::now() >= next_beat) {
        store_->add(mine, 1, Deadline::after(t.read_timeout));
        next_beat = Clock::now() + t.interval;
      }
      if (o.members > 1 && !reported) {
        auto seen = store_->try_get(theirs, Deadline::after(t.read_timeout));
        const auto now = Clock::now();
        if (seen == kHeartbeatDone) {
          reported = true;  // it finished and left on purpose: nothing more to watch
        } else if (seen && seen != last_seen) {
          last_seen = seen;
          last_change = now;
        } else if (now - last_change >= silence_limit) {
          reported = true;
          spdlog::warn("keep-alive: node {} sent no heartbeat for {} (keep-alive {} x {})", watched,
                       format_duration(now - last_change),
                       format_duration(t.interval), t.max_attempts);
          on_dead_(watched);
        }
      }
    } catch (const InterruptedError&) {
      return;
    } catch (const Error& e) {
      on_error_(e.what());
      return;
    }
    std::unique_lock lock(mutex_);
    // A timer, not a poll of a condition: the wait ends at the next check or at once on stop.
    if (stop_cv_.wait_for(lock, tick, [&] { return stop_; })) return;
  }
}

std::unique_ptr<KeepAlive> ring_keep_alive(const StoreOpener& open_store, const Round& round,
                                           const KeepAliveTiming& timing,
                                           RendezvousHandler::LostCallback on_lost,
                                           RendezvousHandler::ErrorCallback on_error) {
  if (round.ranks.group_world_size < 2) return nullptr;  // nobody to watch
  HeartbeatOptions o;
  o.prefix = round.prefix;
  o.group_rank = round.ranks.group_rank;
  o.members = round.ranks.group_world_size;
  o.timing = timing;
  return std::make_unique<Heartbeat>(open_store(Deadline::after(timing.read_timeout)), o,
                                     std::move(on_lost), std::move(on_error));
}

void mark_left_on_purpose(Store& store, const Round& round, Deadline deadline) {
  store.set(beat_key(round.prefix, round.ranks.group_rank), kHeartbeatDone, deadline);
}

}  // namespace ddprun
