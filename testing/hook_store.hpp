#pragma once
// A store that passes every call on to another, and calls a hook before each write and each get:
// for the tests of what a node writes or reads, and when. Header-only: only tests that link the
// store use it.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "store/store.hpp"

namespace ddprun::test {

// A store that runs `before_set(key, value)` before each set and each compare_set (with the
// value it would write) and `before_get(key)` before each get it passes on (either may be
// empty), for a test to act at that exact moment or to see what was written or read when.
class HookStore final : public store::Store {
 public:
  using BeforeSet = std::function<void(const std::string& key, const std::string& value)>;
  using BeforeGet = std::function<void(const std::string& key)>;

  HookStore(std::unique_ptr<store::Store> inner, BeforeSet before_set, BeforeGet before_get = {})
      : inner_(std::move(inner)),
        before_set_(std::move(before_set)),
        before_get_(std::move(before_get)) {}

  void set(const std::string& key, const std::string& value, Deadline deadline) override {
    if (before_set_) before_set_(key, value);
    inner_->set(key, value, deadline);
  }
  std::string get(const std::string& key, Deadline deadline) override {
    if (before_get_) before_get_(key);
    return inner_->get(key, deadline);
  }
  std::optional<std::string> try_get(const std::string& key, Deadline deadline) override {
    return inner_->try_get(key, deadline);
  }
  bool check(const std::vector<std::string>& keys, Deadline deadline) override {
    return inner_->check(keys, deadline);
  }
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override {
    return inner_->add(key, delta, deadline);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired, Deadline deadline) override {
    if (before_set_) before_set_(key, desired);
    return inner_->compare_set(key, expected, desired, deadline);
  }
  bool erase(const std::string& key, Deadline deadline) override {
    return inner_->erase(key, deadline);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     Deadline deadline) override {
    return inner_->multi_get(keys, deadline);
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Deadline deadline) override {
    inner_->multi_set(keys, values, deadline);
  }
  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    inner_->wait(keys, deadline);
  }
  std::int64_t num_keys(Deadline deadline) override { return inner_->num_keys(deadline); }
  void ping(Deadline deadline) override { inner_->ping(deadline); }
  std::string describe() const override { return inner_->describe(); }
  void interrupt() override { inner_->interrupt(); }

 private:
  std::unique_ptr<store::Store> inner_;
  BeforeSet before_set_;
  BeforeGet before_get_;
};

}  // namespace ddprun::test
