#include "rendezvous/memory_store.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"

namespace ddprun {

std::int64_t parse_counter(const std::string& value, const std::string& key) {
  std::size_t used = 0;
  try {
    auto n = std::stoll(value, &used);
    if (used == value.size()) return n;
  } catch (const std::exception&) {
  }
  throw Error(fmt::format("store key '{}' holds '{}', not an integer counter", key, value));
}

MemoryStore::MemoryStore() : MemoryStore(std::make_shared<Shared>()) {}

MemoryStore::MemoryStore(std::shared_ptr<Shared> shared)
    : shared_(std::move(shared)),
      mutex_(shared_->mutex),
      changed_(shared_->changed),
      data_(shared_->data) {}

std::unique_ptr<MemoryStore> MemoryStore::connect() const {
  return std::unique_ptr<MemoryStore>(new MemoryStore(shared_));
}

void MemoryStore::set(const std::string& key, const std::string& value, Deadline) {
  ensure_open();
  {
    std::lock_guard lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key, Deadline deadline) {
  ensure_open();
  std::unique_lock lock(mutex_);
  wait_locked(lock, {key}, deadline);
  return data_.at(key);
}

std::optional<std::string> MemoryStore::try_get(const std::string& key, Deadline) {
  ensure_open();
  std::lock_guard lock(mutex_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

bool MemoryStore::check(const std::vector<std::string>& keys, Deadline) {
  ensure_open();
  std::lock_guard lock(mutex_);
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta, Deadline) {
  ensure_open();
  std::int64_t result = 0;
  {
    std::lock_guard lock(mutex_);
    auto it = data_.find(key);
    result = (it == data_.end() ? 0 : parse_counter(it->second, key)) + delta;
    data_[key] = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired, Deadline) {
  ensure_open();
  std::string result;
  {
    std::lock_guard lock(mutex_);
    auto it = data_.find(key);
    const std::string current = it == data_.end() ? std::string() : it->second;
    if (current != expected) return current;
    data_[key] = desired;
    result = desired;
  }
  changed_.notify_all();
  return result;
}

bool MemoryStore::erase(const std::string& key, Deadline) {
  ensure_open();
  std::lock_guard lock(mutex_);
  return data_.erase(key) > 0;
}

std::vector<std::string> MemoryStore::multi_get(const std::vector<std::string>& keys,
                                                Deadline deadline) {
  ensure_open();
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, deadline);
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(data_.at(k));
  return out;
}

void MemoryStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values, Deadline) {
  ensure_open();
  if (keys.size() != values.size()) {
    throw Error(fmt::format("multi_set: {} keys but {} values", keys.size(), values.size()));
  }
  {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < keys.size(); ++i) data_[keys[i]] = values[i];
  }
  changed_.notify_all();
}

void MemoryStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  ensure_open();
  std::unique_lock lock(mutex_);
  wait_locked(lock, keys, deadline);
}

std::int64_t MemoryStore::num_keys(Deadline) {
  ensure_open();
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(data_.size());
}

void MemoryStore::ping(Deadline) { ensure_open(); }

void MemoryStore::interrupt() {
  {
    std::lock_guard lock(mutex_);  // so a waiter cannot miss the flag between check and sleep
    interrupted_ = true;
  }
  changed_.notify_all();
}

void MemoryStore::ensure_open() const {
  if (interrupted_) throw InterruptedError("memory store handle was interrupted");
}

void MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock,
                              const std::vector<std::string>& keys, Deadline deadline) {
  auto start = Clock::now();
  auto all_present = [&] {
    return interrupted_ || std::all_of(keys.begin(), keys.end(),
                                       [&](const auto& k) { return data_.count(k) > 0; });
  };
  const bool ready = changed_.wait_until(lock, deadline.when(), all_present);
  if (interrupted_) throw InterruptedError("interrupted while waiting in the memory store");
  if (!ready) {
    throw TimeoutError(fmt::format("timed out after {} waiting for key(s) {} in the memory store",
                                   format_duration(Clock::now() - start), keys));
  }
}

}  // namespace ddprun
