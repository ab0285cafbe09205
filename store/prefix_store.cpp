#include "store/prefix_store.hpp"

namespace ddprun::store {

PrefixStore::PrefixStore(std::string prefix, Store& inner)
    : prefix_(std::move(prefix) + "/"), inner_(inner) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value, Deadline deadline) {
  inner_.set(full(key), value, deadline);
}
std::string PrefixStore::get(const std::string& key, Deadline deadline) {
  return inner_.get(full(key), deadline);
}
std::optional<std::string> PrefixStore::try_get(const std::string& key, Deadline deadline) {
  return inner_.try_get(full(key), deadline);
}
bool PrefixStore::check(const std::vector<std::string>& keys, Deadline deadline) {
  return inner_.check(full(keys), deadline);
}
std::int64_t PrefixStore::add(const std::string& key, std::int64_t delta, Deadline deadline) {
  return inner_.add(full(key), delta, deadline);
}
std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired, Deadline deadline) {
  return inner_.compare_set(full(key), expected, desired, deadline);
}
bool PrefixStore::erase(const std::string& key, Deadline deadline) {
  return inner_.erase(full(key), deadline);
}
std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys,
                                                Deadline deadline) {
  return inner_.multi_get(full(keys), deadline);
}
void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values, Deadline deadline) {
  inner_.multi_set(full(keys), values, deadline);
}
void PrefixStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  inner_.wait(full(keys), deadline);
}

Store::Arrival PrefixStore::arrive(const std::string& counter, std::int64_t total,
                                   const std::string& release, const std::string& then_get,
                                   Deadline deadline) {
  return inner_.arrive(full(counter), total, full(release), full(then_get), deadline);
}
std::int64_t PrefixStore::num_keys(Deadline deadline) { return inner_.num_keys(deadline); }
bool PrefixStore::pipeline_get(const std::string& key, Deadline deadline) {
  auto* inner = inner_.pipelining();
  return inner != nullptr && inner->pipeline_get(full(key), deadline);
}

void PrefixStore::ping(Deadline deadline) { inner_.ping(deadline); }
std::string PrefixStore::describe() const { return inner_.describe() + " prefix " + prefix_; }

}  // namespace ddprun::store
