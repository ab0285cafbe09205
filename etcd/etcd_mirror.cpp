#include "etcd/etcd_mirror.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

namespace {

// A read of the prefix that no member answers within this is tried again; so is a watch that saw
// no event for an hour (etcd sends nothing while the keys do not change).
constexpr auto kReadTimeout = std::chrono::seconds(10);
constexpr auto kWatchTimeout = std::chrono::hours(1);
// After an answer that trying again at once would not change (a refused request).
constexpr auto kErrorPause = std::chrono::seconds(1);

}  // namespace

EtcdMirror::EtcdMirror(std::vector<EtcdEndpoint> endpoints, std::string prefix)
    : prefix_(std::move(prefix)), client_(std::move(endpoints)), thread_([this] { run(); }) {}

EtcdMirror::~EtcdMirror() {
  stopping_ = true;
  client_.interrupt();
  wake();
  thread_.join();
}

std::optional<std::string> EtcdMirror::wait(const std::string& full_key, Deadline deadline,
                                            const std::atomic<bool>& stop) {
  std::unique_lock lock(mutex_);
  while (true) {
    if (stop) return std::nullopt;
    if (auto it = keys_.find(full_key); it != keys_.end()) return it->second;
    if (deadline.expired()) return std::nullopt;
    changed_.wait_until(lock, deadline.when());
  }
}

void EtcdMirror::wake() {
  { std::lock_guard lock(mutex_); }
  changed_.notify_all();
}

std::string EtcdMirror::state() const {
  std::lock_guard lock(mutex_);
  const std::string error = last_error_.empty() ? "" : "; last error: " + last_error_;
  if (!synced_) return fmt::format("the copy of {} is not read yet{}", prefix_, error);
  return fmt::format("the copy of {} follows etcd from revision {}{}", prefix_, next_, error);
}

void EtcdMirror::run() {
  while (!stopping_) {
    try {
      bool synced;
      {
        std::lock_guard lock(mutex_);
        synced = synced_;
      }
      if (!synced) read_all();
      std::int64_t from;
      {
        std::lock_guard lock(mutex_);
        from = next_;
      }
      client_.watch_prefix(prefix_, from, Deadline::after(kWatchTimeout), [this](const EtcdEvent& e) {
        apply(e);
        return false;
      });
    } catch (const InterruptedError&) {
      return;
    } catch (const EtcdError& e) {
      if (e.code() == kEtcdCompacted) {
        // The history after the last event seen is gone: what changed in it is read whole.
        std::lock_guard lock(mutex_);
        synced_ = false;
        continue;
      }
      fail(e.what());
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, kErrorPause, [this] { return stopping_.load(); });
    } catch (const TimeoutError& e) {
      // An hour without an event, or no member answered the read: the loop resumes.
      if (!dynamic_cast<const EtcdUnavailable*>(&e)) continue;
      fail(e.what());
    } catch (const Error& e) {
      fail(e.what());
      std::unique_lock lock(mutex_);
      changed_.wait_for(lock, kErrorPause, [this] { return stopping_.load(); });
    }
  }
}

void EtcdMirror::read_all() {
  auto answer = client_.call("/v3/kv/range", prefix_range(prefix_), Deadline::after(kReadTimeout));
  std::map<std::string, std::string> keys;
  for (const auto& kv : answer.value("kvs", nlohmann::json::array())) {
    auto parsed = parse_kv(kv);
    keys[parsed.key] = std::move(parsed.value);
  }
  {
    std::lock_guard lock(mutex_);
    keys_ = std::move(keys);
    next_ = json_int(answer.at("header"), "revision") + 1;
    synced_ = true;
    last_error_.clear();
  }
  changed_.notify_all();
}

void EtcdMirror::apply(const EtcdEvent& event) {
  {
    std::lock_guard lock(mutex_);
    if (event.deleted) {
      keys_.erase(event.kv.key);
    } else {
      keys_[event.kv.key] = event.kv.value;
    }
    next_ = event.kv.mod_revision + 1;
    last_error_.clear();
  }
  changed_.notify_all();
}

void EtcdMirror::fail(const std::string& what) {
  spdlog::debug("etcd mirror of {}: {}", prefix_, what);
  std::lock_guard lock(mutex_);
  last_error_ = what;
}

}  // namespace ddprun
