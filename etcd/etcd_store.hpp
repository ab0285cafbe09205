#pragma once
// The Store interface over etcd (--rdzv-backend=etcd): every key lives under one prefix per run
// id ("/ddprun/<run id>/"), so runs sharing an etcd stay apart and a job's end can remove its
// keys with one range delete.
//
// What etcd offers is used rather than emulated: compare_set is a transaction comparing the
// key's value (or its absence); add counts the key's versions (see add); get and wait read once and then watch from the revision after that
// read (no polling); multi_get and multi_set are single transactions (in chunks of etcd's
// default limit of 128 operations). See EtcdClient for failover between endpoints.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "etcd/etcd_client.hpp"
#include "etcd/etcd_mirror.hpp"
#include "store/store.hpp"

namespace ddprun {

struct EtcdStoreOptions {
  std::vector<EtcdEndpoint> endpoints;
  std::string prefix = "/ddprun";  // --rdzv-conf etcd_prefix
  std::string run_id = "default";
  // When set, get and wait serve the keys under its prefix from its copy (see EtcdMirror); the
  // stores of one agent share it.
  std::shared_ptr<EtcdMirror> mirror;

  // "<prefix>/<run id>/": where the run's keys live.
  std::string run_prefix() const;
};

class EtcdStore final : public store::Store {
 public:
  // Checks that an etcd member answers by `deadline` (TimeoutError naming every endpoint).
  EtcdStore(EtcdStoreOptions options, Deadline deadline);
  ~EtcdStore() override;

  void set(const std::string& key, const std::string& value, Deadline deadline) override;
  std::string get(const std::string& key, Deadline deadline) override;
  std::optional<std::string> try_get(const std::string& key, Deadline deadline) override;
  bool check(const std::vector<std::string>& keys, Deadline deadline) override;
  // A counter is its key's etcd version (how many puts it had since it was created): adding 1
  // is one put, so adders never conflict (a compare-and-set loop on one hot key costs O(n^2)
  // transactions when n agents join at once). The same transaction puts a key of the
  // increment's own ("<key>/+/<random>") and runs only while that key is absent, so a try sent
  // again after a lost answer finds it (and the count as of its revision) instead of counting
  // twice. Hence only deltas >= 0 (ProtocolError otherwise), a counter key is written by add
  // alone and its value is not the count, the increments' keys count in num_keys, and erase
  // removes them.
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired, Deadline deadline) override;
  bool erase(const std::string& key, Deadline deadline) override;
  std::vector<std::string> multi_get(const std::vector<std::string>& keys,
                                     Deadline deadline) override;
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;
  // The run's keys.
  std::int64_t num_keys(Deadline deadline) override;
  void ping(Deadline deadline) override;
  std::string describe() const override;
  void interrupt() override;

  // etcd-only operations, for the lease keep-alive and the job's clean-up.
  EtcdClient& client() { return client_; }
  // The full etcd key of a store key.
  std::string full_key(const std::string& key) const { return run_prefix_ + key; }
  // Puts `value` at `key`, attached to `lease` (0: none).
  void put(const std::string& key, const std::string& value, std::int64_t lease, Deadline deadline);
  // How many of the run's keys start with `key_prefix` ("" counts them all).
  std::int64_t count_prefix(const std::string& key_prefix, Deadline deadline);
  // Removes every key of the run; returns how many there were.
  std::int64_t erase_run(Deadline deadline);
  // Removes every key of the run in one transaction, provided that no key of it starts with
  // `key_prefix`; returns how many keys were removed, or nullopt when such a key exists.
  std::optional<std::int64_t> erase_run_unless(const std::string& key_prefix, Deadline deadline);

 private:
  // The key's current state and the revision the read saw.
  struct Read {
    std::optional<EtcdKv> kv;
    std::int64_t revision = 0;
  };
  Read read(const std::string& key, Deadline deadline);
  // get() from the mirror's copy, when the mirror covers the key: the value, or nullopt when
  // the rest of the wait is left to a read and a watch of this store's own.
  std::optional<std::string> get_mirrored(const std::string& key, Deadline deadline);
  // Where the increments of counter `key` live.
  std::string counter_prefix(const std::string& key) const;
  static constexpr const char* kCounterDir = "/+/";

  EtcdStoreOptions options_;
  std::string run_prefix_;
  EtcdClient client_;
  std::atomic<bool> interrupted_{false};
};

}  // namespace ddprun
