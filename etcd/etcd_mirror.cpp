#include "etcd/etcd_mirror.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.hpp"

namespace ddprun {

namespace {

// A read of the prefix that no member answers within this is tried again.
constexpr auto kReadTimeout = std::chrono::seconds(10);
// After an answer that trying again at once would not change (a refused request).
constexpr std::chrono::milliseconds kErrorPause{1000};

}  // namespace

EtcdMirror::EtcdMirror(std::vector<EtcdEndpoint> endpoints, std::string prefix,
                       std::chrono::milliseconds quiet)
    : prefix_(std::move(prefix)),
      quiet_(quiet),
      client_(std::move(endpoints)),
      thread_([this] { run(); }) {}

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
  if (!synced_) return fmt::format("the copy of {} waits for a read of etcd{}", prefix_, error);
  return fmt::format("the copy of {} follows etcd from revision {}{}", prefix_, next_, error);
}

void EtcdMirror::run() {
  while (!stopping_) {
    try {
      bool synced;
      std::int64_t from;
      {
        std::lock_guard lock(mutex_);
        synced = synced_;
        from = next_;
      }
      if (!synced) {
        read_all();
        std::lock_guard lock(mutex_);
        from = next_;
      }
      // A watch that saw no event for `quiet_` starts again from a read: etcd sends nothing
      // while the keys do not change, and a member that froze (stopped, hung) keeps its
      // connections open and silent, which only a request bounded by EtcdClient's try finds
      // out and moves away from.
      client_.watch_prefix(prefix_, from, Deadline::after(quiet_), [this](const EtcdEvent& e) {
        apply(e);
        return false;
      });
    } catch (const InterruptedError&) {
      return;
    } catch (const EtcdError& e) {
      // Compacted: the history after the last event seen is gone, and what changed in it is
      // read whole at once. Any other refusal: the same after a pause.
      const bool compacted = e.code() == kEtcdCompacted;
      if (!compacted) fail(e.what());
      start_over(compacted ? std::chrono::milliseconds(0) : kErrorPause);
    } catch (const TimeoutError& e) {
      // A quiet spell, or no member answered the read: read again.
      if (dynamic_cast<const EtcdUnavailable*>(&e)) fail(e.what());
      start_over(std::chrono::milliseconds(0));
    } catch (const std::exception& e) {
      // An answer that is not what the API documents, or the like: after a pause, from a read.
      fail(e.what());
      start_over(kErrorPause);
    }
  }
}

void EtcdMirror::start_over(std::chrono::milliseconds pause) {
  std::unique_lock lock(mutex_);
  synced_ = false;
  if (pause.count() > 0) changed_.wait_for(lock, pause, [this] { return stopping_.load(); });
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
  std::lock_guard lock(mutex_);
  // The first failure after a success is worth a warning; the retries that follow are not.
  if (last_error_.empty()) {
    spdlog::warn("etcd: the copy of {} cannot follow etcd ({}); waits for its keys read etcd "
                 "themselves in their last seconds until it can",
                 prefix_, what);
  } else {
    spdlog::debug("etcd: the copy of {}: {}", prefix_, what);
  }
  last_error_ = what;
}

}  // namespace ddprun
