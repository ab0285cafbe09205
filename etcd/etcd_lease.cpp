#include "etcd/etcd_lease.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace ddprun {

EtcdLease grant_lease(EtcdClient& client, std::chrono::seconds ttl, Deadline deadline) {
  auto grant = client.call("/v3/lease/grant", {{"TTL", ttl.count()}}, deadline);
  EtcdLease lease{json_int(grant, "ID"), std::chrono::seconds(json_int(grant, "TTL"))};
  if (lease.id == 0 || lease.ttl.count() <= 0) {
    throw ProtocolError(fmt::format("etcd {}: lease grant answered {}", client.describe(),
                                    grant.dump()));
  }
  return lease;
}

bool renew_lease(EtcdClient& client, std::int64_t lease, Deadline deadline) {
  auto answer = client.call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}, deadline);
  return json_int(answer, "TTL") > 0;
}

void put_on_lease(EtcdClient& client, const std::string& key, const std::string& value,
                  std::int64_t lease, Deadline deadline) {
  client.call("/v3/kv/put", put_request(key, value, lease), deadline);
}

EtcdRead read_key(EtcdClient& client, const std::string& key, Deadline deadline) {
  auto answer = client.call("/v3/kv/range", key_only(key), deadline);
  EtcdRead r{json_int(answer.at("header"), "revision"), std::nullopt};
  if (answer.contains("kvs") && !answer["kvs"].empty()) r.value = parse_kv(answer["kvs"][0]).value;
  return r;
}

bool etcd_has_leader(EtcdClient& client, Deadline deadline) {
  try {
    client.call("/v3/maintenance/status", nlohmann::json::object(), deadline);
    return true;
  } catch (const InterruptedError&) {
    throw;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace ddprun
