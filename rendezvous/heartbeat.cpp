#include "rendezvous/heartbeat.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

namespace {

std::string beat_key(const std::string& prefix, int group_rank) {
  return fmt::format("{}/hb/{}", prefix, group_rank);
}

}  // namespace

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
  std::optional<std::string> last_seen;
  int missed = 0;
  bool reported = false;
  while (true) {
    try {
      store_->add(mine, 1, Deadline::after(t.read_timeout));
      if (o.members > 1 && !reported) {
        auto seen = store_->try_get(theirs, Deadline::after(t.read_timeout));
        if (seen == kHeartbeatDone) {
          reported = true;  // it finished and left on purpose: nothing more to watch
        } else {
          missed = (seen && seen != last_seen) ? 0 : missed + 1;
          last_seen = seen;
          if (missed >= t.max_attempts) {
            reported = true;
            spdlog::warn("keep-alive: node {} missed {} heartbeats ({} apart)", watched, missed,
                         format_duration(t.interval));
            on_dead_(watched);
          }
        }
      }
    } catch (const InterruptedError&) {
      return;
    } catch (const Error& e) {
      on_error_(e.what());
      return;
    }
    std::unique_lock lock(mutex_);
    // A timer, not a poll: the wait ends at the next beat or at once on stop.
    if (stop_cv_.wait_for(lock, t.interval, [&] { return stop_; })) return;
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
