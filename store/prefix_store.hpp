#pragma once
// A Store decorator that puts every key under "<prefix>/". Does not own the inner store.

#include "store/store.hpp"

namespace ddprun::store {

class PrefixStore final : public Store, public Pipelining {
 public:
  PrefixStore(std::string prefix, Store& inner);

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
  // The inner store's, with the key prefixed.
  Pipelining* pipelining() override { return inner_.pipelining() != nullptr ? this : nullptr; }
  bool pipeline_get(const std::string& key, Deadline deadline) override;
  // Counts the inner store's keys: the protocol has no per-prefix count.
  std::int64_t num_keys(Deadline deadline) override;
  void ping(Deadline deadline) override;
  std::string describe() const override;
  void interrupt() override { inner_.interrupt(); }

  // `key`'s name in the inner store.
  std::string full(const std::string& key) const { return prefix_ + key; }

 private:
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;  // with the trailing '/'
  Store& inner_;
};

}  // namespace ddprun::store
