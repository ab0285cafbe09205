#pragma once
// An in-process Store for unit tests of logic built on Store. Thread-safe: blocking calls wait on
// a condition variable woken by writes, so several threads may share one instance. connect()
// opens another handle on the same data, with its own interrupt(), like a second TCP client.

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "rendezvous/store.hpp"

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

 private:
  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                   Deadline deadline);

  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, std::string> data;
  };
  explicit MemoryStore(std::shared_ptr<Shared> shared);

  std::shared_ptr<Shared> shared_;
  std::mutex& mutex_;
  std::condition_variable& changed_;
  std::map<std::string, std::string>& data_;
  std::atomic<bool> interrupted_{false};
  void ensure_open() const;
};

}  // namespace ddprun
