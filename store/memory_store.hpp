#pragma once
// An in-process Store: a handle on a SharedStoreState, the TCP server's own data and waiters
// (the same semantics, waiters woken by the writes that create their keys) behind a mutex, so
// several threads may share one instance; blocking calls wait on a condition variable.
// connect() opens another handle on the same data, with its own interrupt(), like a second TCP
// client. Two uses: a store of its own for unit tests of logic built on Store (the default
// constructor), and the agent that hosts the TCP store using it without a socket
// (TcpStoreServer::local_client), while its workers and the other agents use TCP.

#include <atomic>
#include <memory>
#include <string>

#include "store/protocol.hpp"
#include "store/store.hpp"
#include "store/store_state.hpp"

namespace ddprun::store {

class MemoryStore final : public Store {
 public:
  // A store of its own, keys in one namespace, described as "memory".
  MemoryStore();
  // A handle on `shared`, keys in namespace `ns` (a run id, as a TCP client's hello picks it);
  // `where` names the store in describe() and in messages.
  MemoryStore(std::shared_ptr<store::SharedStoreState> shared, std::string ns, std::string where);
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
  Arrival arrive(const std::string& counter, std::int64_t total, const std::string& release,
                 const std::string& then_get, Deadline deadline) override;
  std::int64_t num_keys(Deadline deadline) override;
  void ping(Deadline deadline) override;
  std::string describe() const override { return where_; }
  void interrupt() override;

  // How many calls (on any handle) are blocked waiting for keys right now.
  std::size_t num_waiting() const;

 private:
  // Runs one request as the server would, waiting (until `deadline`) when it must.
  store::Response execute(store::Request request, Deadline deadline);

  std::shared_ptr<store::SharedStoreState> shared_;
  std::string ns_;
  std::string where_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace ddprun::store
