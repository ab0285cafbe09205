#pragma once
// The store's data and its blocked waiters: pure logic, no sockets, not thread-safe by itself.
// The server's connections feed it decoded requests on the server's thread; SharedStoreState
// below lets in-process handles (MemoryStore) use the same data from other threads.
//
// Keys live in one namespace per run id. A request that must wait for keys (Get, MultiGet, Wait)
// registers a waiter keyed by the missing keys; writes that create a key wake exactly the waiters
// on that key. Nothing polls.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "store/protocol.hpp"

namespace ddprun::store {

class StoreState {
 public:
  using WaiterId = std::uint64_t;
  using Ready = std::function<void()>;

  // Runs `request` (any command but Hello) in namespace `ns`. Returns the response, or nullopt
  // when the request must wait: then `waiter` is set and `ready` will be called once (from a
  // later write) when every key exists; the caller then runs the same request again. A blocking
  // request with timeout_ms == 0 never waits: it gets Status::kTimeout at once. An Arrive
  // arrives on its first run and is marked (`arrived`): a run again only waits.
  std::optional<Response> execute(const std::string& ns, Request& request, Ready ready,
                                  WaiterId& waiter);
  std::optional<Response> execute(const std::string& ns, Request&& request, Ready ready,
                                  WaiterId& waiter) {
    return execute(ns, request, std::move(ready), waiter);
  }

  // Forgets a waiter (its timeout passed, or its connection closed). Unknown ids are ignored.
  void cancel(WaiterId waiter);

  std::size_t num_waiters() const { return waiters_.size(); }
  std::size_t num_keys(const std::string& ns) const;
  std::vector<std::string> keys(const std::string& ns) const;

 private:
  struct Namespace {
    std::unordered_map<std::string, std::string> data;
    std::unordered_map<std::string, std::vector<WaiterId>> waiting;  // key -> waiters on it
  };
  struct Waiter {
    Namespace* ns;  // a node of namespaces_, which never moves
    std::vector<std::string> missing_keys;
    std::size_t missing = 0;
    Ready ready;
  };

  Response run(Namespace& ns, const Request& request);
  void store(Namespace& ns, const std::string& key, std::string value);
  std::int64_t add(Namespace& ns, const std::string& key, std::int64_t delta);
  void wake(Namespace& ns, const std::string& key);
  std::vector<std::string> missing_keys(const Namespace& ns,
                                        std::span<const std::string> keys) const;

  std::unordered_map<std::string, Namespace> namespaces_;
  std::unordered_map<WaiterId, Waiter> waiters_;
  WaiterId next_waiter_ = 1;
};

// A StoreState that several threads share: the server's thread for its TCP clients and the
// in-process handles of the agent that hosts it. Whoever calls execute() or cancel() holds
// `mutex`. A waiter's Ready runs under that lock on the writer's thread, so it may only flag
// and wake (an in-process handle: `changed`) or post to another thread (a TCP connection),
// never call back into the state.
struct SharedStoreState {
  std::mutex mutex;
  std::condition_variable changed;
  StoreState state;
};

}  // namespace ddprun::store
