#include "store/store_state.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <unordered_set>

#include "common/error.hpp"
#include "store/store.hpp"

namespace ddprun::store {
namespace {

Response ok_number(std::int64_t n) {
  Response r;
  r.number = n;
  return r;
}

Response ok_value(std::string v) {
  Response r;
  r.values.push_back(std::move(v));
  return r;
}

}  // namespace

std::size_t StoreState::num_keys(const std::string& ns) const {
  auto it = namespaces_.find(ns);
  return it == namespaces_.end() ? 0 : it->second.data.size();
}

std::vector<std::string> StoreState::keys(const std::string& ns) const {
  std::vector<std::string> keys;
  auto it = namespaces_.find(ns);
  if (it == namespaces_.end()) return keys;
  keys.reserve(it->second.data.size());
  for (const auto& [key, _] : it->second.data) keys.push_back(key);
  return keys;
}

std::vector<std::string> StoreState::missing_keys(const Namespace& ns,
                                                  std::span<const std::string> keys) const {
  std::vector<std::string> missing;
  if (keys.size() == 1) {  // the common case: no set of the keys seen
    if (!ns.data.count(keys[0])) missing.push_back(keys[0]);
    return missing;
  }
  std::unordered_set<std::string_view> seen;
  for (const auto& k : keys) {
    if (!ns.data.count(k) && seen.insert(k).second) missing.push_back(k);
  }
  return missing;
}

std::optional<Response> StoreState::execute(const std::string& ns_name, Request& request,
                                            Ready ready, WaiterId& waiter) {
  auto& ns = namespaces_[ns_name];
  if (request.command == Command::kArrive && !request.arrived) {
    request.arrived = add(ns, request.keys[0], 1);
    if (*request.arrived == request.number) store(ns, request.keys[1], "1");
  }
  if (may_block(request.command)) {
    auto missing = missing_keys(ns, keys_waited_for(request));
    if (!missing.empty()) {
      if (request.timeout_ms == 0) {
        Response r;
        r.status = Status::kTimeout;
        return r;
      }
      waiter = next_waiter_++;
      for (const auto& k : missing) ns.waiting[k].push_back(waiter);
      auto count = missing.size();
      waiters_.emplace(waiter, Waiter{&ns, std::move(missing), count, std::move(ready)});
      return std::nullopt;
    }
  }
  return run(ns, request);
}

Response StoreState::run(Namespace& ns, const Request& r) {
  switch (r.command) {
    case Command::kHello:
      throw ProtocolError("hello after the handshake");
    case Command::kAuth:
      throw ProtocolError("auth after the handshake");
    case Command::kSet:
      store(ns, r.keys[0], r.values[0]);
      return Response{};
    case Command::kGet:
      return ok_value(ns.data.at(r.keys[0]));
    case Command::kTryGet: {
      auto it = ns.data.find(r.keys[0]);
      if (it == ns.data.end()) {
        Response missing;
        missing.status = Status::kMissing;
        return missing;
      }
      return ok_value(it->second);
    }
    case Command::kCheck:
      return ok_number(missing_keys(ns, r.keys).empty() ? 1 : 0);
    case Command::kAdd:
      return ok_number(add(ns, r.keys[0], r.number));
    case Command::kArrive: {
      auto response = ok_value(ns.data.at(r.keys[2]));
      response.number = r.arrived.value_or(0);
      return response;
    }
    case Command::kCompareSet: {
      auto it = ns.data.find(r.keys[0]);
      const std::string current = it == ns.data.end() ? std::string() : it->second;
      if (current != r.values[0]) return ok_value(current);
      store(ns, r.keys[0], r.values[1]);
      return ok_value(r.values[1]);
    }
    case Command::kErase:
      return ok_number(ns.data.erase(r.keys[0]) > 0 ? 1 : 0);
    case Command::kMultiGet: {
      Response resp;
      resp.values.reserve(r.keys.size());
      for (const auto& k : r.keys) resp.values.push_back(ns.data.at(k));
      return resp;
    }
    case Command::kMultiSet:
      for (std::size_t i = 0; i < r.keys.size(); ++i) store(ns, r.keys[i], r.values[i]);
      return Response{};
    case Command::kWait:
    case Command::kPing:
      return Response{};
    case Command::kNumKeys:
      return ok_number(static_cast<std::int64_t>(ns.data.size()));
  }
  throw ProtocolError("unhandled command");
}

void StoreState::store(Namespace& ns, const std::string& key, std::string value) {
  auto [it, created] = ns.data.insert_or_assign(key, std::move(value));
  if (created) wake(ns, key);
}

std::int64_t StoreState::add(Namespace& ns, const std::string& key, std::int64_t delta) {
  auto it = ns.data.find(key);
  std::int64_t value = delta;
  if (it != ns.data.end() &&
      __builtin_add_overflow(parse_counter(it->second, key), delta, &value)) {
    throw Error(fmt::format("store key '{}' holds {}: adding {} overflows a 64-bit counter", key,
                            it->second, delta));
  }
  store(ns, key, std::to_string(value));
  return value;
}

void StoreState::wake(Namespace& ns, const std::string& key) {
  auto it = ns.waiting.find(key);
  if (it == ns.waiting.end()) return;
  auto ids = std::move(it->second);
  ns.waiting.erase(it);
  for (auto id : ids) {
    auto w = waiters_.find(id);
    if (w == waiters_.end() || --w->second.missing > 0) continue;
    auto ready = std::move(w->second.ready);
    waiters_.erase(w);
    ready();
  }
}

void StoreState::cancel(WaiterId id) {
  auto w = waiters_.find(id);
  if (w == waiters_.end()) return;
  auto& waiting = w->second.ns->waiting;
  for (const auto& k : w->second.missing_keys) {
    auto list = waiting.find(k);
    if (list == waiting.end()) continue;
    std::erase(list->second, id);
    if (list->second.empty()) waiting.erase(list);
  }
  waiters_.erase(w);
}

}  // namespace ddprun::store
