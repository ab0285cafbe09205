#pragma once
// etcd's leases, and the plain reads a lease's watcher needs, as calls over EtcdClient: what an
// agent registers its liveness with (etcd deletes a key put on a lease when the lease expires).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/deadline.hpp"
#include "etcd/etcd_client.hpp"

namespace ddprun {

struct EtcdLease {
  std::int64_t id = 0;
  std::chrono::seconds ttl{0};  // as etcd granted it: it raises a TTL below its minimum
};

// Grants a lease of `ttl`. Throws ProtocolError when etcd's answer grants none, and what
// EtcdClient::call throws.
EtcdLease grant_lease(EtcdClient& client, std::chrono::seconds ttl, Deadline deadline);

// Renews `lease` once: false when it had expired already (its keys are gone).
bool renew_lease(EtcdClient& client, std::int64_t lease, Deadline deadline);

// Puts `value` at `key` (a full key) on `lease`.
void put_on_lease(EtcdClient& client, const std::string& key, const std::string& value,
                  std::int64_t lease, Deadline deadline);

// A key as it is now, and the revision etcd read it at (to watch from the next).
struct EtcdRead {
  std::int64_t revision = 0;
  std::optional<std::string> value;  // nullopt: no such key
};
EtcdRead read_key(EtcdClient& client, const std::string& key, Deadline deadline);

// Whether etcd answers now with a leader (the client asks with "has leader" metadata): false
// when it cannot, within `deadline`. Throws InterruptedError.
bool etcd_has_leader(EtcdClient& client, Deadline deadline);

}  // namespace ddprun
