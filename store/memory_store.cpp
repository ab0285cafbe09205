#include "store/memory_store.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.hpp"

namespace ddprun::store {

using store::Command;
using store::Request;
using store::Response;
using store::Status;

namespace {

Request request(Command command, std::vector<std::string> keys = {},
                std::vector<std::string> values = {}) {
  Request r;
  r.command = command;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

}  // namespace

std::int64_t parse_counter(const std::string& value, const std::string& key) {
  std::size_t used = 0;
  try {
    auto n = std::stoll(value, &used);
    if (used == value.size()) return n;
  } catch (const std::exception&) {
  }
  throw Error(fmt::format("store key '{}' holds '{}', not an integer counter", key, value));
}

MemoryStore::MemoryStore()
    : MemoryStore(std::make_shared<store::SharedStoreState>(), "", "memory") {}

MemoryStore::MemoryStore(std::shared_ptr<store::SharedStoreState> shared, std::string ns,
                         std::string where)
    : shared_(std::move(shared)), ns_(std::move(ns)), where_(std::move(where)) {}

std::unique_ptr<MemoryStore> MemoryStore::connect() const {
  return std::make_unique<MemoryStore>(shared_, ns_, where_);
}

Response MemoryStore::execute(Request r, Deadline deadline) {
  const auto start = Clock::now();
  std::unique_lock lock(shared_->mutex);
  while (true) {
    if (interrupted_) {
      throw InterruptedError(fmt::format("the handle on store at {} was interrupted", where_));
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline.remaining()).count();
    r.timeout_ms = static_cast<std::uint32_t>(std::min<long long>(left, UINT32_MAX));
    bool ready = false;
    store::StoreState::WaiterId waiter = 0;
    // Runs under the lock, on the thread of whichever handle or connection wrote the key.
    auto on_ready = [&ready, &changed = shared_->changed] {
      ready = true;
      changed.notify_all();
    };
    auto response = shared_->state.execute(ns_, r, on_ready, waiter);
    if (response) {
      if (response->status == Status::kTimeout) break;
      return *response;
    }
    shared_->changed.wait_until(lock, deadline.when(), [&] { return ready || interrupted_; });
    if (!ready) shared_->state.cancel(waiter);
    if (interrupted_) {
      throw InterruptedError(fmt::format("interrupted while waiting in store at {}", where_));
    }
    if (!ready) break;
    // Every key exists now: run the request again to answer it.
  }
  throw TimeoutError(fmt::format("timed out after {} waiting for key(s) {} in store at {}",
                                 format_duration(Clock::now() - start), keys_waited_for(r),
                                 where_));
}

void MemoryStore::set(const std::string& key, const std::string& value, Deadline deadline) {
  execute(request(Command::kSet, {key}, {value}), deadline);
}

std::string MemoryStore::get(const std::string& key, Deadline deadline) {
  return execute(request(Command::kGet, {key}), deadline).values.at(0);
}

std::optional<std::string> MemoryStore::try_get(const std::string& key, Deadline deadline) {
  auto response = execute(request(Command::kTryGet, {key}), deadline);
  if (response.status == Status::kMissing) return std::nullopt;
  return response.values.at(0);
}

bool MemoryStore::check(const std::vector<std::string>& keys, Deadline deadline) {
  return execute(request(Command::kCheck, keys), deadline).number != 0;
}

std::int64_t MemoryStore::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  auto r = request(Command::kAdd, {key});
  r.number = delta;
  return execute(std::move(r), deadline).number;
}

std::string MemoryStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired, Deadline deadline) {
  return execute(request(Command::kCompareSet, {key}, {expected, desired}), deadline).values.at(0);
}

bool MemoryStore::erase(const std::string& key, Deadline deadline) {
  return execute(request(Command::kErase, {key}), deadline).number != 0;
}

std::vector<std::string> MemoryStore::multi_get(const std::vector<std::string>& keys,
                                                Deadline deadline) {
  return execute(request(Command::kMultiGet, keys), deadline).values;
}

void MemoryStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values, Deadline deadline) {
  if (keys.size() != values.size()) {
    throw Error(fmt::format("multi_set: {} keys but {} values", keys.size(), values.size()));
  }
  execute(request(Command::kMultiSet, keys, values), deadline);
}

void MemoryStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  execute(request(Command::kWait, keys), deadline);
}

Store::Arrival MemoryStore::arrive(const std::string& counter, std::int64_t total,
                                   const std::string& release, const std::string& then_get,
                                   Deadline deadline) {
  auto r = request(Command::kArrive, {counter, release, then_get});
  r.number = total;
  auto response = execute(std::move(r), deadline);
  return Arrival{response.number, std::move(response.values.at(0))};
}

std::int64_t MemoryStore::num_keys(Deadline deadline) {
  return execute(request(Command::kNumKeys), deadline).number;
}

void MemoryStore::ping(Deadline deadline) { execute(request(Command::kPing), deadline); }

std::size_t MemoryStore::num_waiting() const {
  std::lock_guard lock(shared_->mutex);
  return shared_->state.num_waiters();
}

void MemoryStore::interrupt() {
  {
    std::lock_guard lock(shared_->mutex);  // so a waiter cannot miss the flag between check and sleep
    interrupted_ = true;
  }
  shared_->changed.notify_all();
}

}  // namespace ddprun::store
