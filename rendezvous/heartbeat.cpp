#include "rendezvous/heartbeat.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

std::string beat_key(const std::string& prefix, int group_rank) {
  return fmt::format("{}/hb/{}", prefix, group_rank);
}

Heartbeat::Heartbeat(std::unique_ptr<store::Store> store, HeartbeatOptions options,
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

namespace {

std::string wake_key(const std::string& counter_key, std::int64_t count) {
  return fmt::format("{}/{}", counter_key, count);
}

}  // namespace

void beat(store::Store& store, const std::string& key, std::int64_t count, Deadline deadline) {
  store.multi_set({key, wake_key(key, count)}, {std::to_string(count), ""}, deadline);
  // Two wake-up keys stay, so a watcher one beat behind still finds the one it blocks on.
  if (count > 2) store.erase(wake_key(key, count - 2), deadline);
}

void Heartbeat::run() {
  const auto& o = options_;
  const auto& t = o.timing;
  const auto mine = beat_key(o.prefix, o.group_rank);
  const int watched = (o.group_rank + 1) % o.members;
  const auto theirs = beat_key(o.prefix, watched);
  const auto silence_limit = t.interval * t.max_attempts;
  const auto read = [&] { return Deadline::after(t.read_timeout); };
  // What a counter says: nullopt when the member left on purpose ("done": nothing more to
  // watch), else its count (0 before its first beat).
  const auto read_count = [&](const std::string& key) -> std::optional<std::int64_t> {
    auto value = store_->try_get(key, read());
    if (value == kHeartbeatDone) return std::nullopt;
    return value ? store::parse_counter(*value, key) : 0;
  };
  try {
    // This member's own count so far: a ring formed again on the same keys counts on.
    std::int64_t beats = read_count(mine).value_or(0);
    bool watching = o.members > 1;
    std::int64_t seen = 0;  // the watched member's count at its last beat seen
    if (watching) {
      const auto count = read_count(theirs);
      watching = count.has_value();
      seen = count.value_or(0);
    }
    auto last_change = Clock::now();
    auto next_beat = Clock::now();
    while (true) {
      if (Clock::now() >= next_beat) {
        beat(*store_, mine, ++beats, read());
        next_beat = Clock::now() + t.interval;
      }
      if (!watching) {
        std::unique_lock lock(mutex_);
        if (stop_cv_.wait_until(lock, next_beat, [&] { return stop_; })) return;
        continue;
      }
      // Blocks until the watched member's next beat, our own beat or its deadline.
      const auto deadline = last_change + silence_limit;
      try {
        store_->get(wake_key(theirs, seen + 1), Deadline::at(std::min(next_beat, deadline)));
        ++seen;
        last_change = Clock::now();
        continue;
      } catch (const TimeoutError&) {
      }
      if (Clock::now() < deadline) continue;  // our own beat is due
      const auto count = read_count(theirs);
      if (!count) {
        watching = false;  // it finished and left on purpose
      } else if (*count > seen) {
        seen = *count;  // it beat, but we were behind and its wake-up key is gone
        last_change = Clock::now();
      } else {
        watching = false;
        spdlog::warn("keep-alive: node {} sent no heartbeat for {} (keep-alive {} x {})", watched,
                     format_duration(Clock::now() - last_change), format_duration(t.interval),
                     t.max_attempts);
        on_dead_(watched);
      }
    }
  } catch (const InterruptedError&) {
  } catch (const Error& e) {
    on_error_(e.what());
  }
}

std::optional<std::uint64_t> RingListeners::attach(
    const RendezvousHandler::LostCallback& on_lost,
    const RendezvousHandler::ErrorCallback& on_error) {
  std::lock_guard lock(mutex_);
  if (spent_) return std::nullopt;
  on_lost_ = on_lost;
  on_error_ = on_error;
  return ++attached_;
}

void RingListeners::detach(std::uint64_t attached) {
  std::lock_guard lock(mutex_);
  if (attached != attached_) return;
  on_lost_ = nullptr;
  on_error_ = nullptr;
}

RingListeners::Attached RingListeners::attach_kept(
    std::shared_ptr<RingListeners> kept, const RendezvousHandler::LostCallback& on_lost,
    const RendezvousHandler::ErrorCallback& on_error) {
  if (kept) {
    if (auto number = kept->attach(on_lost, on_error)) return {std::move(kept), *number, false};
  }
  auto fresh = std::make_shared<RingListeners>();
  const auto number = *fresh->attach(on_lost, on_error);
  return {std::move(fresh), number, true};
}

void RingListeners::lost(int group_rank) {
  std::lock_guard lock(mutex_);
  spent_ = true;
  if (on_lost_) on_lost_(group_rank);
}

void RingListeners::error(std::string message) {
  std::lock_guard lock(mutex_);
  spent_ = true;
  if (on_error_) on_error_(std::move(message));
}

void RingListeners::ended() {
  std::lock_guard lock(mutex_);
  spent_ = true;
}

class StandingRing::Handle final : public KeepAlive {
 public:
  Handle(std::shared_ptr<RingListeners> listeners, std::uint64_t attached)
      : listeners_(std::move(listeners)), attached_(attached) {}
  ~Handle() override { listeners_->detach(attached_); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

 private:
  std::shared_ptr<RingListeners> listeners_;
  std::uint64_t attached_;
};

StandingRing::StandingRing(store::StoreOpener open_store, HeartbeatOptions options)
    : open_store_(std::move(open_store)),
      options_(std::move(options)),
      listeners_(std::make_shared<RingListeners>()) {
  form();
}

StandingRing::~StandingRing() = default;

void StandingRing::form() {
  heartbeat_ = std::make_unique<Heartbeat>(
      open_store_(Deadline::after(options_.timing.read_timeout)), options_,
      [l = listeners_](int group_rank) { l->lost(group_rank); },
      [l = listeners_](std::string message) { l->error(std::move(message)); });
}

std::unique_ptr<KeepAlive> StandingRing::attach(RendezvousHandler::LostCallback on_lost,
                                                RendezvousHandler::ErrorCallback on_error) {
  auto attached =
      RingListeners::attach_kept(heartbeat_ ? listeners_ : nullptr, on_lost, on_error);
  if (attached.renewed) {
    heartbeat_.reset();
    listeners_ = attached.listeners;
    form();
  }
  return std::make_unique<Handle>(listeners_, attached.number);
}

std::unique_ptr<KeepAlive> RingKeeper::attach(const store::StoreOpener& open_store,
                                              const Round& round, const KeepAliveTiming& timing,
                                              RendezvousHandler::LostCallback on_lost,
                                              RendezvousHandler::ErrorCallback on_error) {
  if (round.ranks.group_world_size < 2) {
    ring_.reset();
    return nullptr;  // nobody to watch
  }
  HeartbeatOptions o;
  o.prefix = round.keep_alive_prefix();
  o.group_rank = round.ranks.group_rank;
  o.members = round.ranks.group_world_size;
  o.timing = timing;
  const auto same = [&](const HeartbeatOptions& kept) {
    return kept.prefix == o.prefix && kept.group_rank == o.group_rank && kept.members == o.members;
  };
  if (!ring_ || !same(ring_->options())) {
    ring_.reset();  // another ring: what the old one saw is about other members
    ring_ = std::make_unique<StandingRing>(open_store, o);
  }
  return ring_->attach(std::move(on_lost), std::move(on_error));
}

void mark_left_on_purpose(store::Store& store, const Round& round, Deadline deadline) {
  store.set(beat_key(round.keep_alive_prefix(), round.ranks.group_rank), kHeartbeatDone, deadline);
}

}  // namespace ddprun
