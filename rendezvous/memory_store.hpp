#pragma once
// An in-process Store for unit tests of logic built on Store. It runs the TCP server's own
// StoreState (the same semantics, waiters woken by the writes that create their keys) behind a
// mutex, so several threads may share one instance; blocking calls wait on a condition
// variable. connect() opens another handle on the same data, with its own interrupt(), like a
// second TCP client.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "rendezvous/protocol.hpp"
#include "rendezvous/store.hpp"
#include "rendezvous/store_state.hpp"

namespace ddprun {

class MemoryStore final : public Store {
 public:
  MemoryStore();
  // Another handle on this store's data; interrupting one handle leaves the others working.
  std::unique_ptr<MemoryStore> connect() const;

  void set(const std::string& key, const std::string& value, Deadline deadline) override;
  std::string get(const std::string& key, Deadline deadline) override;
  std::optional<std::string> try_get(const std::string& key, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys, Deadline deadline) override;
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired, Deadline deadline) override;
  bool erase(const std::string& key, Deadline deadline) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     Deadline deadline) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  std::int64_t num_keys(Deadline deadline) override;
  void ping(Deadline deadline) override;
  std::string describe() const override { return "memory"; }
  void interrupt() override;

  // How many calls (on any handle) are blocked waiting for keys right now.
  std::size_t num_waiting() const;

 private:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    store::StoreState state;
  };
  explicit MemoryStore(std::shared_ptr<Shared> shared);

  // Runs one request as the server would, waiting (until `deadline`) when it must.
  store::Response execute(store::Request request, Deadline deadline);

  std::shared_ptr<Shared> shared_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace ddprun
