#include "agent/heartbeat.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

Heartbeat::Heartbeat(std::unique_ptr<Store> store, HeartbeatOptions options,
                     DeadCallback on_dead, std::function<void(std::string)> on_error)
    : store_(std::move(store)),
      options_(options),
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
  const auto mine = fmt::format("{}/hb/{}", o.prefix, o.group_rank);
  const int watched = (o.group_rank + 1) % o.members;
  const auto theirs = fmt::format("{}/hb/{}", o.prefix, watched);
  std::optional<std::string> last_seen;
  int missed = 0;
  bool reported = false;
  while (true) {
    try {
      store_->add(mine, 1, Deadline::after(o.read_timeout));
      if (o.members > 1 && !reported) {
        auto seen = store_->try_get(theirs, Deadline::after(o.read_timeout));
        if (seen == kHeartbeatDone) {
          reported = true;  // it finished and left on purpose: nothing more to watch
        } else {
          missed = (seen && seen != last_seen) ? 0 : missed + 1;
          last_seen = seen;
          if (missed >= o.max_attempts) {
            reported = true;
            spdlog::warn("keep-alive: node {} missed {} heartbeats ({} apart)", watched, missed,
                         format_duration(o.interval));
            on_dead_(watched, *store_);
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
    if (stop_cv_.wait_for(lock, o.interval, [&] { return stop_; })) return;
  }
}

}  // namespace ddprun
